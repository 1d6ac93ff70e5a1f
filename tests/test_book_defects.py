"""Defects a reader of the book met, each held by a test of its class (not of its one instance):
a drawn dtype read from the stage's kind, a recorded table with no empty column whatever depth it is
asked for, a sentence about predictions read from the predictions, a figure whose legend covers
nothing, the blind error read from the committed comparison."""
from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pelib.views import blind_error, diagrams as D, nvfp4

REPO = Path(__file__).resolve().parents[1]


def _svg_text(d) -> str:
    m = re.search(r"<svg.*</svg>", d.svg, re.S)
    root = ET.fromstring(m.group(0))
    return " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))


@pytest.mark.parametrize("stage,dtype", [("nvfp4/00_single_stage", "FP16"), ("nvfp4/01_pipelined", "FP16"),
                                         ("fp8/07_smem_staged_epilogue", "BF16"), ("sm90/00_tma_wgmma", "BF16")])
def test_data_path_draws_the_output_type_the_kind_allocates(stage, dtype):
    """The output's type in the data path is the one the stage's kind allocates for 'out' (NVFP4 writes
    FP16, the patch embedding BF16), and no other output type is drawn."""
    s = D._stage(stage, None)
    out = s.kind.inputs(s.kind.problem("small"), 0, "cpu")["out"]
    assert D._DTYPE_NAMES[str(out.dtype)] == dtype
    text = _svg_text(D.data_path(stage))
    assert f"global C ({dtype})" in text, text
    others = {"FP16", "BF16", "FP32"} - {dtype}
    assert not [o for o in others if f"-> {o}" in text or f"C ({o})" in text], text


def test_cta_pair_commit_arrives_on_mbarriers_not_tmem():
    """The arrow into the peer's TMEM is the MMA's write; the commit (mask 0b11) is said to arrive on
    mbarriers, in both CTAs."""
    text = _svg_text(D.cta_pair("fp8/01_cta2"))
    assert "peer TMEM" in text and "writes" in text
    assert re.search(r"0b11.*mbarriers empty\[s\]", text), text


@pytest.mark.parametrize("name,stages", [("00_single_stage", None), ("01_pipelined", None), ("01_pipelined", 2),
                                         ("01_pipelined", 5)])
def test_recorded_table_never_has_an_empty_column(name, stages):
    """stages=None means the stage's own default depth (its exports), never the key None."""
    t = nvfp4.results_table(name, stages)
    assert "None" not in t.caption and "None" not in " ".join(t.columns)
    for c in t.columns:
        assert any(str(r.get(c, "")).strip() for r in t.rows), f"column {c!r} of {t.caption!r} is empty"
    if stages is None and name != "00_single_stage":
        n = nvfp4.stage(name).exports.pipeline_stages
        assert f"NUM_STAGES={n}" in t.caption and f"(S={n})" in " ".join(t.columns)


def _doc():
    from pelib.predict import history
    return history.committed()


def test_ring_sentence_is_read_from_the_predictions():
    """The sentence under the ring figure quotes each depth's error from the committed predictions, and
    follows them when they change (a typed sentence would not)."""
    doc = _doc()
    said = nvfp4.ring_misses(doc)
    for r in doc["nvfp4_ring"]:
        assert f"{r['error']:+.0%}".replace("%", " %") in said
    assert "on the curve" not in said
    changed = copy.deepcopy(doc)
    for r in changed["nvfp4_ring"]:
        r["error"] = -0.05
    moved = nvfp4.ring_misses(changed)
    assert "-5 %" in moved and "faster" in moved and moved != said
    chapter = (REPO / "book" / "chapters" / "nvfp4_pipelined.md").read_text()
    assert "on\nthe curve" not in chapter and "on the curve" not in chapter


def test_ring_figure_legend_covers_no_axis():
    import matplotlib.pyplot as plt
    fig = nvfp4.ring_figure(_doc())
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        leg = ax.get_legend()
        r = fig.canvas.get_renderer()
        lb = leg.get_window_extent(r)
        assert not lb.overlaps(ax.get_window_extent(r)), "the legend sits on the axes"
        assert not lb.overlaps(ax.yaxis.label.get_window_extent(r)), "the legend covers the y label"
        labels = [t.get_text() for t in leg.get_texts()]
        assert not any(re.search(r"\b(\w+) \(\1\b", t) for t in labels), labels   # "predicted (predicted (...))"
        assert any("predicted" in t for t in labels) and any("recorded" in t for t in labels)
    finally:
        plt.close(fig)


def test_blind_error_is_read_from_the_committed_comparison(tmp_path, monkeypatch):
    e = blind_error.errors()
    for chip, rel in blind_error.COMPARISONS.items():
        d = json.loads((REPO / rel).read_text())
        assert e[chip]["mae"] == d["summary"]["mae"]
    assert f"MAE {e['H200']['mae']:.0%} on H200".replace("%", " %") in blind_error.clause()
    assert set(blind_error.COMPARISONS) == {"H200"} and "round6" in blind_error.COMPARISONS["H200"]
    # another comparison, another clause; a missing one is named
    for chip, rel in blind_error.COMPARISONS.items():
        d = json.loads((REPO / rel).read_text())
        d["summary"]["mae"] = 0.5
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(json.dumps(d))
    monkeypatch.setattr(blind_error, "ROOT", tmp_path)
    blind_error.errors.cache_clear()
    try:
        assert "MAE 50 % on H200" in blind_error.clause()
        (tmp_path / blind_error.COMPARISONS["H200"]).unlink()
        blind_error.errors.cache_clear()
        with pytest.raises(blind_error.BlindErrorMissing, match="prediction-vs-measured-blind6.json"):
            blind_error.clause()
    finally:
        blind_error.errors.cache_clear()


def test_every_printed_b200_prediction_says_the_blind_error():
    """A chapter that prints a B200 prediction prints the model's blind error beside it (read from the
    committed comparison by views.blind_error, not typed)."""
    bare = []
    for p in sorted((REPO / "book" / "chapters").glob("*.md")):
        for ln in p.read_text().split("\n"):
            if re.search(r"vp\.b200_(ring_)?summary\(", ln) and "blind_error.beside(" not in ln:
                bare.append(f"{p.stem}: {ln.strip()}")
    assert not bare, bare
    line = blind_error.beside("x on a B200: 1.000 ms predicted")
    assert line.startswith("x on a B200") and "MAE 22 % (H200), measured 2026-12-03" in line


def test_a_sweep_table_shows_runs_and_names_the_failed_in_one_note():
    """A variant that did not run is not a row of blanks with its reason off the right edge: the table holds
    the runs, and one note per reason names the variants that did not run."""
    from pelib.views import hopper
    first = hopper.load_sweep(hopper.sweep_files()[0])
    t = hopper.recorded_variants_table(first)
    failed = [r["label"] for r in first["variants"] if not r.get("median_ms")]
    assert failed and all(r["ms"] for r in t.rows) and "note" not in t.columns
    assert len(t.rows) == len(first["variants"]) - len(failed)
    said = " ".join(t.notes)
    assert all(label in said for label in failed) and "trapped (launch failed)" in said


def test_a_data_path_picture_is_drawn_where_it_teaches():
    """The review of 2026-12-01 found one data-path picture in 17 chapters. A stage's data path is drawn on at
    most three pages (the preface's destination, the FP8 problem's road map, the first hour's kernel), and no
    more than 14 pages draw one at all: a page about waiting, warps or a schedule draws that instead."""
    from collections import Counter
    chapters = Path(__file__).resolve().parents[1] / "book" / "chapters"
    calls = [(p.stem, m.group(1)) for p in sorted(chapters.glob("*.md"))
             for m in re.finditer(r'diagrams\.data_path\("([^"]+)"', p.read_text())]
    per_stage = Counter(stage for _, stage in calls)
    assert max(per_stage.values()) <= 3, f"one data path on more than three pages: {per_stage.most_common(3)}"
    assert len({page for page, _ in calls}) <= 14, f"{len(calls)} pages draw a data path: {sorted(calls)}"
