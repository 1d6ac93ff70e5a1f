"""Where a reader gets this code: its public address, read from one setting, or the source archive of the
commit the book was built from.

The one setting is `[project.urls] Repository` in pyproject.toml; without it, the git remote `origin` when
it is a public https address; without either (this tree has neither), no address is invented: the book
links the source archive of its commit (book/_ext/pe_book.py writes `_downloads/<ARCHIVE>-<rev>.tar.gz`).
"""
from __future__ import annotations

import re
import subprocess
import tomllib

from ..paths import ROOT

ARCHIVE = "pe-blackwell"          # the archive's name and the folder it unpacks into
SETTING = "pyproject.toml [project.urls] Repository"


def url() -> str | None:
    """The repository's public address, or None where none is configured (see the module doc)."""
    try:
        meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        meta = {}
    urls = {k.lower(): v for k, v in (meta.get("project", {}).get("urls") or {}).items()}
    if urls.get("repository"):
        return urls["repository"]
    try:
        origin = subprocess.run(["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    return origin if re.match(r"^https://[\w.-]+/", origin) else None


def revision() -> str:
    """The short commit the tree is at, '-dirty' when tracked files changed, 'unversioned' outside git."""
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unversioned"


def archive_name(rev: str | None = None) -> str:
    """The source archive's file name for a revision (the book's build writes it under _downloads/)."""
    return f"{ARCHIVE}-{rev or revision()}.tar.gz"


class GetTheCode(str):
    """How to get the code, as a chapter shows it: the clone line where there is an address, else the
    archive link (relative to a chapter page of the built book)."""

    def _repr_html_(self) -> str:
        import html

        u = url()
        if u:
            return (f'<div class="pe-get-code">Repository: <a href="{html.escape(u)}">{html.escape(u)}</a>'
                    f'<pre>git clone {html.escape(u)} {ARCHIVE} &amp;&amp; cd {ARCHIVE}</pre></div>')
        name = archive_name()
        return (f'<div class="pe-get-code">This project has no public address configured ({SETTING} is the '
                f'one setting for it). The code of the commit this book was built from is its source archive: '
                f'<a href="../_downloads/{html.escape(name)}"><code>{html.escape(name)}</code></a> '
                f'(the code-branch button at the top of every page links it too).'
                f'<pre>tar xzf {html.escape(name)} &amp;&amp; cd {ARCHIVE}</pre></div>')


def get_the_code() -> GetTheCode:
    u = url()
    text = (f"git clone {u} {ARCHIVE} && cd {ARCHIVE}" if u else
            f"no public address ({SETTING}); the source archive: _downloads/{archive_name()}; "
            f"tar xzf {archive_name()} && cd {ARCHIVE}")
    return GetTheCode(text)
