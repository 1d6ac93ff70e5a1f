"""Every chapter in the table of contents executes without error (as `make book` will)."""
from pathlib import Path

import pytest
import yaml

BOOK = Path(__file__).resolve().parents[1] / "book"


def _chapters():
    toc = yaml.safe_load((BOOK / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def test_toc_lists_existing_chapters():
    for f in _chapters():
        assert (BOOK / f"{f}.md").exists(), f"_toc.yml names {f}, which does not exist"


def test_config_fails_on_errors_and_needs_no_network():
    cfg = yaml.safe_load((BOOK / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "force"
    assert cfg["execute"]["raise_on_error"] is True
    assert cfg["execute"]["timeout"] >= 300
    assert cfg["sphinx"]["config"]["intersphinx_mapping"] == {}


@pytest.mark.book
@pytest.mark.parametrize("chapter", _chapters())
def test_chapter_executes(chapter):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    path = BOOK / f"{chapter}.md"
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
