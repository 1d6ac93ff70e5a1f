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
- Every kernel source under `src/kernels/` also becomes an HTML page beside its copy (`<file>.html`,
  highlighted, with line anchors `#L12`), and the chapters' links to a stage open that page: served over
  HTTP a `.cu` file would be downloaded (`application/cu-seeme`), not shown.
- The search page ranks the pages by how often they use the query's words (the Sphinx index carries no
  term frequencies; `_static/pe-search.js`, written at the end of the build, does) and builds its
  snippets from prose, not from code, diffs or tables.
- Kernels started by the build see PELIB_BOOK_BUILD=1, so widgets embed their precomputed offline views.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

BOOK = Path(__file__).resolve().parents[1]
REPO = BOOK.parent
VENDOR = BOOK / "_vendor"
KERNELS = REPO / "src" / "kernels"
sys.path.insert(0, str(REPO / "src"))   # pelib.views.repository: the one reader of the repository's address
from pelib.views import repository  # noqa: E402

ARCHIVE_NAME = repository.ARCHIVE
# Chapters link to stage sources relative to the chapter file (book/chapters/x.md -> ../../src/kernels/...),
# which is right in JupyterLab; the built page sits one level higher (chapters/x.html -> ../src/kernels/...)
# and links the source's HTML page (x.cu -> x.cu.html).
SOURCE_LINK = re.compile(r'href="\.\./\.\./src/kernels/([^"#]+?\.(?:cu|cuh|h|cpp))"')
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".cpp", ".c", ".hpp")
_DROP_SCRIPT = ("sphinx-thebe", "THEBE_JS_URL", "require.min.js", "embed-amd.js", "thebe@")


def _revision() -> str:
    return repository.revision()


def _archive_name(app: Sphinx) -> str:
    return repository.archive_name(app.config.pe_revision)


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
        context["body"] = SOURCE_LINK.sub(r'href="../src/kernels/\1.html"', context["body"])
    context["pe_archive"] = f"_downloads/{_archive_name(app)}"
    if pagename == "search" and context.get("script_files") is not None:
        from sphinx.builders.html._assets import _JavaScript

        context["script_files"].append(_JavaScript("_static/pe-search.js"))


def header_buttons(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """After the theme's buttons: one link to the source archive of the commit this book was built from."""
    buttons = context.get("header_buttons")
    if buttons is None:
        return
    url = app.config.pe_repository_url or repository.url() or context["pathto"](context["pe_archive"], 1)
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
    _source_pages(dest, app.config.pe_revision)
    _search_weights(app, out)
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


_PAGE_CSS = ("body{font-family:system-ui,sans-serif;margin:1.2em auto;max-width:60em;padding:0 1em;color:#1b1f23}"
             "pre{font-size:13px;line-height:1.45;overflow-x:auto;background:#f6f8fa;padding:.6em .8em}"
             "a.pe-lineno{color:#8b949e;text-decoration:none;display:inline-block;min-width:3.2em;"
             "text-align:right;padding-right:.8em;user-select:none}"
             ":target{background:#fff8c5}header{font-size:.92em;margin-bottom:.6em}")


def _source_pages(root: Path, rev: str) -> None:
    """Each kernel source as an HTML page beside its copy: highlighted, numbered, every line an anchor."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CppLexer

    fmt = HtmlFormatter(nowrap=True)
    style = fmt.get_style_defs(".highlight")
    for src in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        rel = src.relative_to(root.parent.parent).as_posix()        # src/kernels/fp8/00_ws_cta1.cu
        body = highlight(src.read_text(), CppLexer(stripnl=False), fmt).split("\n")
        lines = "\n".join(f'<span id="L{i}"><a class="pe-lineno" href="#L{i}">{i}</a>{ln}</span>'
                           for i, ln in enumerate(body[:-1] if body and body[-1] == "" else body, 1))
        depth = "../" * (len(src.relative_to(root.parent.parent).parts) - 1)
        page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(rel)}</title>'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f'<style>{_PAGE_CSS}{style}</style></head><body><header><strong>{html.escape(rel)}</strong> '
                f'at commit {html.escape(rev)} · <a href="{html.escape(src.name)}">plain text</a> · '
                f'<a href="{depth}chapters/preface.html">the book</a></header>'
                f'<div class="highlight"><pre>{lines}</pre></div></body></html>')
        src.with_name(src.name + ".html").write_text(page)


_ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*?)</article>', re.S)
_TAGS = re.compile(r"<[^>]+>")
_SKIP = re.compile(r"<(script|style)\b.*?</\1>", re.S)
_WORD = re.compile(r"[a-z][a-z0-9_]+|[0-9]+[a-z][a-z0-9_]*")


def _search_weights(app: Sphinx, out: Path) -> None:
    """_static/pe-search.js: for each page, how often it uses each word (the ranking the search page adds
    to Sphinx's), the pages' book order (ties), and the snippet rule (prose only)."""
    order = {d: i for i, d in enumerate(app.env.toctree_includes.get(app.config.root_doc, []))}
    order.setdefault(app.config.root_doc, -1)
    counts = {}
    for docname in sorted(app.env.found_docs):
        page = out / f"{docname}.html"
        if not page.is_file():
            continue
        m = _ARTICLE.search(page.read_text())
        text = html.unescape(_TAGS.sub(" ", _SKIP.sub(" ", m.group(1) if m else "")))
        c = Counter(_WORD.findall(text.lower()))
        counts[docname] = {w: n for w, n in c.items() if n >= 2 and len(w) >= 3}
    data = {"counts": counts, "order": order}
    (out / "_static" / "pe-search.js").write_text(
        "// Written by book/_ext/pe_book.py: per-page word counts for ranking, and prose-only snippets.\n"
        f"window.PE_SEARCH = {json.dumps(data, separators=(',', ':'), sort_keys=True)};\n"
        + (BOOK / "_static" / "pe-search-rank.js").read_text())


def setup(app: Sphinx) -> dict:
    app.add_config_value("pe_revision", "", "html")
    app.add_config_value("pe_repository_url", os.environ.get("PE_REPOSITORY_URL", ""), "html")
    app.connect("builder-inited", builder_inited)
    app.connect("html-page-context", page_context, priority=500)
    app.connect("html-page-context", header_buttons, priority=502)
    app.connect("html-page-context", drop_scripts, priority=900)
    app.connect("build-finished", build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
