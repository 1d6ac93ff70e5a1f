"""The results tree's writers and readers under bad conditions (pelib.results, pelib.bench.write, the book's
loaders, python -m pelib.views.readme): concurrent writers never lose a report or leave broken JSON; a run folder that
is a symbolic link out of the tree is never read; a truncated, emptied or misdated file is an error naming it,
never a silent fall-back to an older (another chip's) result."""
import json
import shutil
import threading
from pathlib import Path

import pytest

from pelib import bench, results
from pelib.views import readme
from pelib.paths import RESULTS, ROOT
from pelib.views import hopper as hv, hopper_limits, numerics

SWEEP_H100 = "2026-11-24-h100/hopper-sweep-2026-11-24T064020-nvidia-h100-80gb-hbm3.json"
SWEEP_H200 = "2026-11-24-h200/hopper-sweep-2026-11-24T064258-nvidia-h200.json"


def tree(tmp_path: Path, *names: str) -> Path:
    """A results tree of copies of committed files (results/<run>/<file>)."""
    root = tmp_path / "results"
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(RESULTS / n, root / n)
    return root


def test_concurrent_writers_keep_every_report_whole(tmp_path):
    """Before (RS03): eight writers of one run in the same second left one file of eight, sometimes not JSON."""
    env = {"date": "2026-12-01T10:00:00+0000", "device": "NVIDIA H200", "git": "abcdef0"}
    go = threading.Barrier(8)
    paths = []

    def write(i):
        go.wait()
        paths.append(bench.write({"env": env, "writer": i, "pad": "x" * (1000 * i)}, out_dir=tmp_path))

    for _ in range(5):
        ts = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert len(set(paths)) == 40
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 40 and not list(tmp_path.glob(".*tmp"))
    writers = sorted(json.loads(f.read_text())["writer"] for f in files)
    assert writers == sorted(list(range(8)) * 5)


def test_a_file_named_as_out_dir_is_refused(tmp_path):
    """Before (N94): FileExistsError: [Errno 17] File exists."""
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(results.ResultsPathError, match="is a file, not a folder"):
        bench.write({"env": {"date": "2026-12-01", "device": "NVIDIA H200", "git": "abcdef0"}}, out_dir=f)


def test_a_truncated_file_is_named(tmp_path):
    """Before (RS05): a raw JSONDecodeError naming no file."""
    root = tree(tmp_path, SWEEP_H200)
    p = root / SWEEP_H200
    p.write_text(p.read_text()[:32])
    with pytest.raises(results.ResultsFileError, match=r"hopper-sweep-2026-11-24T064258-nvidia-h200\.json cannot be"):
        results.load(p)


@pytest.mark.parametrize("damage", ["half", "garbage", "empty"])
def test_a_broken_newest_sweep_is_an_error_not_the_older_chips(tmp_path, damage, monkeypatch, capsys):
    """Before (RS04, BK01, BK07): latest_sweep(), the Hopper verification table and python -m pelib.views.readme
    silently used the older H100 sweep."""
    root = tree(tmp_path, SWEEP_H100, SWEEP_H200)
    assert results.latest_sweep(root)["env"]["device"].startswith("NVIDIA H200")
    p = root / SWEEP_H200
    text = p.read_text()
    p.write_text({"half": text[:len(text) // 2], "garbage": "\x00\xff" * 64, "empty": ""}[damage])
    with pytest.raises(results.ResultsFileError, match="nvidia-h200.json"):
        results.latest_sweep(root)
    monkeypatch.setattr(results, "RESULTS", root)
    with pytest.raises(results.ResultsFileError, match="nvidia-h200.json"):
        hv.recorded_variants_table(hv.load_sweep())
    assert readme.main(["--block", "gpu results"]) == 2
    err = capsys.readouterr().err
    assert "nvidia-h200.json cannot be read" in err and "NVIDIA H100" not in err, err


def test_a_sweep_dated_unlike_its_folder_is_refused(tmp_path):
    """Before (RS06): a sweep dated 9999-12-31 inside 2026-11-24-h100 became the newest."""
    root = tree(tmp_path, SWEEP_H100, SWEEP_H200)
    p = root / SWEEP_H100
    doc = json.loads(p.read_text())
    doc["env"]["date"] = "9999-12-31T00:00:00+0000"
    p.write_text(json.dumps(doc))
    with pytest.raises(results.ResultsFileError, match="records the date 9999-12-31, but its folder is of 2026-11-24"):
        results.latest_sweep(root)


def test_a_run_folder_that_links_out_of_the_tree_is_not_read(tmp_path):
    """Before (RS08): results/2026-12-01-h100 -> a folder outside the tree counted as a run."""
    root = tree(tmp_path, SWEEP_H100)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "blind-x.json").write_text("{}")
    (root / "2026-12-01-h100").symlink_to(outside, target_is_directory=True)
    (root / "2026-11-24-h100" / "blind-y.json").symlink_to(outside / "blind-x.json")
    assert [r.name for r in results.runs(root)] == ["2026-11-24-h100"]
    assert results.files("blind-*.json", root) == []


@pytest.mark.parametrize("what", ["hopper-perf", "blind", "numerics"])
def test_the_book_loaders_name_the_file_they_cannot_read(tmp_path, what, monkeypatch):
    """Before (BK02-BK04): a raw json.decoder.JSONDecodeError naming no file, in a chapter's cell."""
    name = {"hopper-perf": "2026-11-24-h200/hopper-perf.json",
            "blind": next(str(p.relative_to(RESULTS)) for p in results.files("blind-*.json") if "h100" in p.parent.name),
            "numerics": next(str(p.relative_to(RESULTS)) for p in results.files("numerics.json"))}[what]
    root = tree(tmp_path, name)
    (root / name).write_text((RESULTS / name).read_text()[:100])
    monkeypatch.setattr(results, "RESULTS", root)
    with pytest.raises(results.ResultsFileError, match=Path(name).name.replace(".", r"\.")):
        if what == "hopper-perf":
            hv.perf_run("h200")
        elif what == "blind":
            hopper_limits.blind_run("h100", root)
        else:
            numerics.proof_runs(root)


def test_the_blind_round_loaders_name_the_file_they_cannot_read(tmp_path, monkeypatch):
    """Before (BK05): views.blind_rounds' comparison and misses tables raised a raw JSONDecodeError (its
    _run_doc read with json.loads, not results.load)."""
    from pelib.views import blind_rounds as br
    chip = "h100"
    name = br.RUNS[chip][0]
    src = ROOT / name / "prediction-vs-measured.json"
    dst = tmp_path / name / "prediction-vs-measured.json"
    dst.parent.mkdir(parents=True)
    dst.write_text(src.read_text()[: len(src.read_text()) // 2])
    monkeypatch.setattr(br, "ROOT", tmp_path)
    with pytest.raises(results.ResultsFileError, match=r"prediction-vs-measured\.json cannot be read"):
        br.blind_comparison(chip)
