"""The book's own Sphinx extension: offline by construction, and a way in for readers.

- MathJax is served from `_static/mathjax/` (vendored in `book/_vendor/`), never from a CDN.
- Scripts that would reach the network or that the book does not use (sphinx-thebe, the ipywidgets
  embed manager and require.js) are dropped from every page; a page that still names a script outside
  the book fails the build.
- Every chapter gets an `.ipynb` download (written by jupytext from its MyST source, no outputs) in the
  page's download menu, and the stage sources (`src/kernels/`) are copied beside the pages so that the
  chapters' links to them work.
- The repository this book was built from is downloadable as a source archive of that commit
  (`_downloads/<name>-<rev>.tar.gz`), linked from every page's header.
- Kernels started by the build see PELIB_BOOK_BUILD=1, so widgets embed their precomputed offline views.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

BOOK = Path(__file__).resolve().parents[1]
REPO = BOOK.parent
VENDOR = BOOK / "_vendor"
KERNELS = REPO / "src" / "kernels"
ARCHIVE_NAME = "pe-blackwell"
# Chapters link to stage sources relative to the chapter file (book/chapters/x.md -> ../../src/kernels/...),
# which is right in JupyterLab; the built page sits one level higher (chapters/x.html -> ../src/kernels/...).
SOURCE_LINK = re.compile(r'href="\.\./\.\./src/kernels/')
_DROP_SCRIPT = ("sphinx-thebe", "THEBE_JS_URL", "require.min.js", "embed-amd.js", "thebe@")


def _revision() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unversioned"


def _archive_name(app: Sphinx) -> str:
    return f"{ARCHIVE_NAME}-{app.config.pe_revision}.tar.gz"


def builder_inited(app: Sphinx) -> None:
    app.config.html_static_path.append(str(VENDOR))
    os.environ["PELIB_BOOK_BUILD"] = "1"   # inherited by the kernels the build starts
    app.config.pe_revision = _revision()


def _script_src(js) -> str:
    name = getattr(js, "filename", js) or ""
    body = getattr(js, "attributes", {}).get("body", "") if hasattr(js, "attributes") else ""
    return f"{name} {body}"


def drop_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Last of the page handlers: no script the book does not use, none from outside the book."""
    scripts = context.get("script_files")
    if scripts is not None:
        keep = [js for js in scripts if not any(d in _script_src(js) for d in _DROP_SCRIPT)]
        for js in keep:
            name = getattr(js, "filename", js) or ""
            if isinstance(name, str) and re.match(r"^(https?:)?//", name):
                raise ExtensionError(f"page {pagename} would load {name} from the network; "
                                     "vendor it under book/_vendor/ instead")
        scripts[:] = keep
    for css in context.get("css_files", []):
        name = getattr(css, "filename", css) or ""
        if isinstance(name, str) and re.match(r"^(https?:)?//", name):
            raise ExtensionError(f"page {pagename} would load {name} from the network")


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is not None and pagename.startswith("chapters/"):
        context["ipynb_source"] = f"{pagename}.ipynb"
    if "body" in context:
        context["body"] = SOURCE_LINK.sub('href="../src/kernels/', context["body"])
    context["pe_archive"] = f"_downloads/{_archive_name(app)}"


def header_buttons(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """After the theme's buttons: one link to the source archive of the commit this book was built from."""
    buttons = context.get("header_buttons")
    if buttons is None:
        return
    url = app.config.pe_repository_url or context["pathto"](context["pe_archive"], 1)
    buttons.insert(0, {"type": "link", "url": url, "tooltip": "The repository this book was built from",
                       "icon": "fas fa-code-branch", "label": "repository-button", "text": "",
                       "classes": "pst-navbar-icon"})


def build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import jupytext

    out = Path(app.outdir)
    for docname in app.env.found_docs:
        if not docname.startswith("chapters/"):
            continue
        src = BOOK / f"{docname}.md"
        nb = jupytext.read(src)
        dest = out / "_sources" / f"{docname}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(nb, dest, fmt="ipynb")
    dest = out / "src" / "kernels"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(KERNELS, dest, ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))
    archive = out / "_downloads" / _archive_name(app)
    archive.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar.gz",
                        f"--prefix={ARCHIVE_NAME}/", "-o", str(archive), "HEAD"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:  # not a git checkout: archive the tree
        shutil.make_archive(str(archive).removesuffix(".tar.gz"), "gztar", REPO.parent, REPO.name)
        if not archive.exists():
            raise ExtensionError(f"could not write the source archive: {e}") from e


def setup(app: Sphinx) -> dict:
    app.add_config_value("pe_revision", "", "html")
    app.add_config_value("pe_repository_url", os.environ.get("PE_REPOSITORY_URL", ""), "html")
    app.connect("builder-inited", builder_inited)
    app.connect("html-page-context", page_context, priority=500)
    app.connect("html-page-context", header_buttons, priority=502)
    app.connect("html-page-context", drop_scripts, priority=900)
    app.connect("build-finished", build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
