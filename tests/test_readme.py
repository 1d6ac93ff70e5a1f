"""The README's stage table is what `python -m pelib.stage --table` writes, so it cannot rot."""
import pytest

from pelib.paths import ROOT
from pelib.stage import README_BEGIN, README_END, StageError, main, readme_table, readme_with_table, table


def test_readme_stage_table_is_generated(capsys):
    readme = (ROOT / "README.md").read_text()
    assert main(["--table"]) == 0
    printed = capsys.readouterr().out
    assert readme_table(readme) == printed, "README.md's stage table is stale: run `make readme-table`"
    rows = [ln for ln in printed.splitlines() if ln.startswith("| ") and "/" in ln.split("|")[1]]
    assert len(rows) == len(table().rows)                         # one row per stage file
    assert any("sm90/06_permuted_b" in r and "2026-11-24" in r for r in rows)


def test_readme_markers_write_and_refuse(tmp_path):
    text = f"# t\n\n{README_BEGIN}\nold\n{README_END}\nafter\n"
    new = readme_with_table(text, "| a |\n| --- |\n| 1 |\n")
    assert new == f"# t\n\n{README_BEGIN}\n| a |\n| --- |\n| 1 |\n{README_END}\nafter\n"
    assert readme_table(new) == "| a |\n| --- |\n| 1 |\n"
    with pytest.raises(StageError, match="markers"):
        readme_with_table("# no markers\n", "| a |\n")
    with pytest.raises(StageError, match="no stage table"):
        readme_table("# no markers\n")
