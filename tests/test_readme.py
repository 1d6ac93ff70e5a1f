"""The README's generated blocks are what `python -m pelib.views.readme` writes, today and a year from now, so
they cannot rot; nothing in pelib reads the calendar except through pelib.clock."""
import ast
import re

import pytest

from pelib import clock, facts
from pelib.views import readme
from pelib.paths import ROOT, SRC

README = ROOT / "README.md"


def _mask_compiled(md: str) -> str:
    """The stage table with its compiled columns (registers, smem) blanked: what another NVRTC may change."""
    out = []
    for ln in md.splitlines():
        cells = ln.split("|")
        if ln.startswith("| ") and len(cells) > 6 and "/" in cells[1]:
            cells[4] = cells[5] = " ? "
        out.append("|".join(cells))
    return re.sub(r"compiled \(NVRTC [^)]*\)", "compiled (NVRTC ?)", "\n".join(out))


def _compare(committed: str, generated: str, name: str):
    if name == "stage table" and facts.evidence_label(dated=False) not in committed:
        # another NVRTC than the one the committed table names: its register counts may differ by right
        committed, generated = _mask_compiled(committed), _mask_compiled(generated)
    assert committed == generated, f"README.md's {name} is stale: run `make readme`"


@pytest.fixture(scope="module")
def generated():
    return {n: readme.GENERATORS[n]() for n in readme.BLOCKS}


def test_readme_blocks_are_generated(generated):
    text = README.read_text()
    for name in readme.BLOCKS:
        _compare(readme.block(text, name), generated[name], name)
    rows = [ln for ln in generated["stage table"].splitlines() if ln.startswith("| ") and "/" in ln.split("|")[1]]
    assert any("sm90/06_permuted_b" in r and "(2026-11-24)" in r for r in rows)   # the committed run's date


def test_readme_blocks_do_not_move_with_the_calendar(generated, year_ahead):
    """With pelib's clock a year ahead, every generated block is byte for byte the same."""
    assert year_ahead.year >= 2027 and clock.today() == year_ahead
    assert str(year_ahead) in facts.evidence_label()           # the clock reaches what reads it ...
    for name in readme.BLOCKS:                                  # ... and no committed block
        again = readme.GENERATORS[name]()
        assert again == generated[name] and str(year_ahead) not in again, name


def test_gpu_results_come_from_committed_runs():
    text = readme.gpu_results()
    for r in readme.gpu_test_runs():
        assert (ROOT / r["path"]).is_file() and f"{r['passed']} passed, {r['skipped']} skipped" in text
    for path in re.findall(r"`(results/[^`]+)`", text):
        assert (ROOT / path).is_file(), path


def test_gpu_results_of_an_empty_tree(tmp_path):
    assert "No GPU run is committed" in readme.gpu_results(tmp_path)
    (tmp_path / "2026-01-02-h100" / "make-test-gpu-abc1234").mkdir(parents=True)
    (tmp_path / "2026-01-02-h100" / "make-test-gpu-abc1234" / "make_test_gpu.log").write_text(
        "....\n12 passed, 3 skipped, 9 deselected in 4.0s\n")
    assert "on the H100 (2026-01-02, git abc1234): 12 passed, 3 skipped" in readme.gpu_results(tmp_path)


def test_readme_markers_write_and_refuse():
    b, e = readme.markers("stage table")
    text = f"# t\n\n{b}\nold\n{e}\nafter\n"
    new = readme.with_block(text, "stage table", "| a |\n| --- |\n| 1 |\n")
    assert new == f"# t\n\n{b}\n| a |\n| --- |\n| 1 |\n{e}\nafter\n"
    assert readme.block(new, "stage table") == "| a |\n| --- |\n| 1 |\n"
    with pytest.raises(readme.ReadmeError, match="once each"):
        readme.with_block("# no markers\n", "stage table", "| a |\n")
    with pytest.raises(readme.ReadmeError, match="once each"):
        readme.block(text + text, "stage table")


def test_only_pelib_clock_reads_the_calendar():
    """date.today(), datetime.now()/utcnow()/today() appear nowhere in pelib but pelib/clock.py."""
    bad = []
    for path in sorted((SRC / "pelib").rglob("*.py")):
        if path.name == "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("today", "now", "utcnow") and \
                    isinstance(node.value, (ast.Attribute, ast.Name)) and \
                    getattr(node.value, "attr", getattr(node.value, "id", "")) in ("date", "datetime"):
                bad.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert bad == [], f"read the date through pelib.clock: {bad}"
