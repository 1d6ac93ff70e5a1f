# Jupyter server configuration for `make lab` (passed with --config): the chapters are MyST Markdown
# notebooks opened through jupytext. When JupyterLab starts a kernel it writes the kernel's
# language_info into the notebook's metadata, and any change marks the notebook modified. The chapters
# carry no machine-specific metadata, so this contents manager fills in the language_info of the
# Python that serves them (the one the kernel runs) when a chapter is read; opening one then changes
# nothing. jupytext leaves language_info out of the Markdown when a chapter is saved. The kernelspec's
# display name is likewise the installed kernel's.
import sys

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext import build_async_jupytext_contents_manager_class


def _language_info() -> dict:
    from ipykernel.ipkernel import IPythonKernel

    info = dict(IPythonKernel.language_info)
    info["version"] = sys.version.split()[0]
    return info


_Base = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)


class ChapterContentsManager(_Base):
    """jupytext's contents manager; a text notebook read without language_info gets this Python's."""

    language_info = _language_info()

    def _display_name(self, name: str) -> str | None:
        try:
            from jupyter_client.kernelspec import KernelSpecManager

            return KernelSpecManager().get_kernel_spec(name).display_name
        except Exception:  # no such kernel here: JupyterLab asks the reader which one to use
            return None

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and model.get("type") == "notebook" and not path.endswith(".ipynb"):
            meta = model["content"]["metadata"]
            spec = meta.get("kernelspec") or {}
            if spec.get("name"):
                spec["display_name"] = self._display_name(spec["name"]) or spec.get("display_name", "")
            if "language_info" not in meta and spec.get("language") == "python":
                meta["language_info"] = dict(self.language_info)
        return model


c = get_config()  # noqa: F821 - provided by the Jupyter config loader
c.ServerApp.contents_manager_class = ChapterContentsManager
