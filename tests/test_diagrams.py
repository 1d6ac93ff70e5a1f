"""Drawn diagrams (pelib.views.diagrams) and code views (pelib.views.code): generated from the stages'
exports and sources, well-formed SVG with legible text, and true when a stage changes."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pelib import stages
from pelib.views import code, diagrams as D


def _svg(d: D.Diagram) -> ET.Element:
    m = re.search(r"<svg.*</svg>", d.svg, re.S)
    assert m, d
    return ET.fromstring(m.group(0))


def _texts(root) -> list[tuple[str, float]]:
    return [(t.text or "", float(t.get("font-size"))) for t in root.iter("{http://www.w3.org/2000/svg}text")]


@pytest.mark.parametrize("stage", ["nvfp4/00_single_stage", "nvfp4/01_pipelined", "fp8/00_ws_cta1", "fp8/01_cta2",
                                   "fp8/07_smem_staged_epilogue", "fp8/09_persistent_megakernel",
                                   "sm90/00_tma_wgmma", "sm90/01_warp_specialized", "sm90/06_permuted_b"])
def test_diagrams_are_well_formed_and_legible(stage):
    for d in D.for_chapter(stage):
        root = _svg(d)
        vb = [float(x) for x in root.get("viewBox").split()]
        assert vb[2] <= D.WIDTH, f"{d.kind}: wider than the column"
        texts = _texts(root)
        assert len(texts) >= 4 and min(s for _, s in texts) >= D.SMALL
        assert "compiled" in d.caption and stage in d.caption
        assert "pe-diagram" in d._repr_html_()


def test_numbers_come_from_the_exports():
    text = " ".join(t for t, _ in _texts(_svg(D.data_path("fp8/09_persistent_megakernel"))))
    assert "4 slots" in text and "512 columns" in text and "2 accumulators" in text
    five = " ".join(t for t, _ in _texts(_svg(D.data_path("fp8/09_persistent_megakernel", {"NUM_STAGES": 3}))))
    assert "3 slots" in five, "the diagram did not follow the define"
    roles = " ".join(t for t, _ in _texts(_svg(D.roles("fp8/05_epi_warps"))))
    assert roles.count("warp 6") == 2          # five epilogue warps, two CTAs
    tmem = " ".join(t for t, _ in _texts(_svg(D.tmem_map("nvfp4/01_pipelined"))))
    assert "scale factors: 4 slots" in tmem
    hopper = " ".join(t for t, _ in _texts(_svg(D.data_path("sm90/06_permuted_b"))))
    assert "8 KB each (A only)" in hopper and "B resident: 6 × 32 KB" in hopper, hopper
    streamed = " ".join(t for t, _ in _texts(_svg(D.data_path("sm90/01_warp_specialized"))))
    assert "(A + B)" in streamed and "resident" not in streamed


def test_diagrams_refuse_what_a_stage_lacks():
    with pytest.raises(D.DiagramError, match="cta_group::1"):
        D.cta_pair("fp8/00_ws_cta1")
    with pytest.raises(D.DiagramError, match="registers"):
        D.tmem_map("sm90/06_permuted_b")
    with pytest.raises(D.DiagramError, match="persistent"):
        D.tile_schedule("fp8/07_smem_staged_epilogue")


def test_lane_quarters_keep_their_colour():
    svg = D.tmem_map("fp8/09_persistent_megakernel").svg
    for q, colour in enumerate(D.QUARTER):
        assert colour in svg
    from pelib.views import emulate_plots
    import matplotlib.pyplot as plt

    fig = emulate_plots.tmem_cta_pair_figure()
    left, right = emulate_plots.quarter_colours(fig)
    plt.close(fig)
    assert left == right, "the CTA-pair figure colours one lane quarter differently in its two panels"


def test_diff_folds_the_instrumentation():
    d = code.diff("fp8/08a_persistent_tiles")
    c = d.counts()
    assert c["changed"] == stages.diff_stats("fp8/08a_persistent_tiles")["added"] + \
        stages.diff_stats("fp8/08a_persistent_tiles")["removed"]
    assert 0 < c["instrumentation"] < c["changed"]
    html = d._repr_html_()
    assert 'class="pe-instr-toggle"' in html and "PELIB_EXPORT" in html   # present, folded
    assert code.diff("fp8/06_stages").counts()["instrumentation"] == 0
    for view in (code.diff("fp8/06_stages"), code.diff("fp8/01_cta2"), code.diff("nvfp4/01_pipelined"),
                 code.listing("nvfp4/00_single_stage", "PE_DEVICE void load_ktile", "}  // load_ktile")):
        html = view._repr_html_()
        label = re.search(r"show the book's instrumentation \(([^)]*)\)", html)
        # a switch says what it shows; where nothing is folded there is none
        assert (label is None) == ('class="pe-instr-toggle"' not in html)
        assert label is None or re.match(r"\d+ (lines?|wait tags?)", label.group(1)), label.group(1)


def test_a_partial_diff_keeps_the_hunks_asked_for_and_says_what_it_left_out():
    whole = code.diff("fp8/09_persistent_megakernel")
    part = code.diff("fp8/09_persistent_megakernel", only="Early release (F19a)")
    assert len(part.hunks) == 1 and any("Early release (F19a)" in t for _, t in part.hunks[0])
    assert part.left_out == len(whole.hunks) - 1
    assert part.left_out_lines == whole.counts()["changed"] - part.counts()["changed"]
    assert f"1 of {len(whole.hunks)} hunks shown" in part._repr_html_()
    assert "hunks shown" not in whole._repr_html_()
    with pytest.raises(ValueError, match="no hunk .* contains 'not in the diff'"):
        code.diff("fp8/09_persistent_megakernel", only=["Early release (F19a)", "not in the diff"])


def test_a_brief_header_is_one_unfolded_box_with_the_source_link():
    h = code.header("fp8/08a_persistent_tiles", brief=True)
    assert "<details" not in h and "Stage 08a" in h and 'class="pe-src"' in h
    assert "fp8/08_unroll" in h and "python -m pelib.stage fp8/08a_persistent_tiles" in h


def test_a_fold_says_what_it_holds():
    from pelib.facts import Table
    from pelib.views import html as vhtml

    f = vhtml.fold(Table([{"a": 1}], "one row — compiled"), "the descriptors, field by field")
    out = f._repr_html_()
    assert out.startswith('<details class="pe-more"><summary>the descriptors, field by field</summary>')
    assert "one row — compiled" in out and out.endswith("</details>")
    with pytest.raises(ValueError, match="needs a label"):
        vhtml.fold("x", "  ")


def test_listing_keeps_line_numbers_and_folds_exports():
    l = code.listing("fp8/09_persistent_megakernel")
    c = l.counts()
    assert c["instrumentation lines"] > 20 and c["wait tags"] >= 4
    html = l._repr_html_()
    assert f'<span class="pe-ln">{l.first_line}</span>' in html
    assert code.is_instrumentation("PELIB_EXPORT(tile_m, BM);")
    assert not code.is_instrumentation("tcgen05_commit<CG>(smem_u32(mma_done));")
    assert code.strip_tags("mbarrier_wait_parity(&full[s], phase, 2);  // x") == "mbarrier_wait_parity(&full[s], phase);  // x"


def test_folded_header_and_steps():
    h = code.header("fp8/07_smem_staged_epilogue")
    assert h.startswith("<details") and "Stage 07" in h
    s = code.steps(["sm90/00a_smem_ring", "sm90/00b_producer_warpgroup"])
    assert s.count("<details") == 2


def test_roofline_position_is_computed():
    from pelib.views import plots

    text = plots.roofline_position()
    assert "near the ridge" in text and "memory floor" in text and "modelled" in text


# ---- the diagrams drawn from a simulated run (the stages' cached runs at seed 0) -------------------------

from pelib.sim import runs as sim_runs  # noqa: E402


def _text(d: D.Diagram) -> str:
    return " ".join(t for t, _ in _texts(_svg(d)))


def _legible(d: D.Diagram):
    root = _svg(d)
    assert float(root.get("viewBox").split()[2]) <= D.WIDTH, f"{d.kind}: wider than the column"
    sizes = [s for _, s in _texts(root)]
    assert len(sizes) >= 6 and min(sizes) >= D.SMALL, f"{d.kind}: text below {D.SMALL} units"
    assert "compiled" in d.caption and "simulated" in d.caption and d.stage in d.caption


@pytest.fixture(scope="module")
def runs():
    ok, why = sim_runs.available()
    if not ok:
        pytest.skip(why)
    return {k: sim_runs.simulate(k, seed=0) for k in ("nvfp4/01_pipelined", "fp8/01_cta2",
                                                       "fp8/09_persistent_megakernel")}


def test_ring_reads_its_laps_from_the_run(runs):
    r = runs["nvfp4/01_pipelined"]
    d = D.ring("nvfp4/01_pipelined", run=r)
    _legible(d)
    ex = D._stage("nvfp4/01_pipelined").exports
    text = _text(d)
    ns = ex.pipeline_stages
    assert f"slot {ns - 1}" in text and f"full[{ns - 1}]" in text and f"slot {ns}" not in text
    laps = D.ring_laps(r)
    fills = laps["fills"]
    assert [f["k"] for f in fills] == list(range(len(fills))) and all(f["slot"] == f["k"] % ns for f in fills)
    # lap j completes phase j of full[s]: the consumer waits for parity j & 1 (the stage's (k / S) & 1)
    assert all(f["full_parity"] == f["lap"] & 1 for f in fills)
    # the producer waits on empty[s] only before a refill, for the phase its previous use completed
    assert all((f["empty_parity"] is None) == (f["lap"] == 0) for f in fills)
    assert all(f["empty_parity"] == (f["lap"] - 1) & 1 for f in fills if f["lap"])
    # each fill announces the slot's bytes: what the picture prints is what the run's expect_tx said
    assert f"{fills[0]['bytes']:,} B" in text
    for f in fills:
        assert f"k-block {f['k']}: empty " in text and (f"full parity {f['full_parity']}" in text)


def test_ring_parity_flips_in_the_persistent_stage(runs):
    """fp8/09 (PipelineState): the producer waits empty[s] for the complement of the lap's parity, lap 0 too."""
    laps = D.ring_laps(runs["fp8/09_persistent_megakernel"])["fills"]
    assert laps and all(f["full_parity"] == f["lap"] & 1 for f in laps)
    assert all(f["empty_parity"] == (f["lap"] & 1) ^ 1 for f in laps)


def test_pair_signals_name_the_right_ctas(runs):
    r = runs["fp8/01_cta2"]
    d = D.pair_signals("fp8/01_cta2", run=r)
    _legible(d)
    sig = D.pair_signals_of(r)
    ex = D._stage("fp8/01_cta2").exports
    assert sig["loads"][1] == {0}, "the peer's loads must complete on the leader's full[s]"
    assert sig["loads"][0] == {0} and sig["mma_ctas"] == {0}
    assert sig["expect"] == {0: {2 * (ex["a_stage_bytes"] + ex["b_stage_bytes"])}}   # both halves, on the leader
    assert sig["commits"]["empty"] == {0, 1} and sig["commits"]["mma_done"] == {0, 1}
    text = _text(d)
    assert f"A {ex['a_stage_bytes'] // 1024} KB + B {ex['b_stage_bytes'] // 1024} KB" in text
    assert f"{2 * (ex['a_stage_bytes'] + ex['b_stage_bytes']):,} B" in text and "mask 0b11" in text
    assert "full[s] unused" in text and text.count("empty[s]") >= 2
    # the commit's label sits on the barriers' side, not on TMEM (the class of the old "commit 0b11" arrow)
    assert not any("TMEM" in t or "tmem" in t for t, _ in _texts(_svg(d)) if "commit" in t)


def test_overlap_puts_tile_i_drain_beside_tile_i_plus_1(runs):
    r = runs["fp8/09_persistent_megakernel"]
    d = D.overlap("fp8/09_persistent_megakernel", run=r)
    _legible(d)
    text = _text(d)
    assert "accumulator 0" in text and "accumulator 1" in text and "K loop 0" in text
    from pelib import events
    sp = events.spans(r.events, ctas=[D._first_cta(r.events)])
    k1 = next(x for x in sp.spans if x.name == "kloop" and x.args.get("tile_slot") == 1)
    drain0 = [x for x in sp.spans if x.name.startswith("epi_phase") and x.args.get("tile_slot") == 0]
    assert any(x.ts < k1.ts + k1.dur and k1.ts < x.ts + x.dur for x in drain0), "no overlap in the run"


def test_schedule_on_the_real_grid():
    d = D.tile_schedule("fp8/09_persistent_megakernel")
    g = D.schedule_rows("fp8/09_persistent_megakernel")
    s = D._stage("fp8/09_persistent_megakernel")
    cfg = s.launch_config("full")
    assert (g["tiles"], g["clusters"]) == cfg.work and g["n_tiles"] == s.problem("full").n // s.exports.tile_n == 3
    text = _text(d)
    assert f"{g['clusters']} clusters" in text and f"{g['tiles']:,} tiles" in text
    c = g["clusters"]
    # the first block row: clusters 0, 1, 2 side by side; cluster 0 comes back at tile c, in the row c // 3
    assert "cluster 0, turn 0, acc 0" in text and "cluster 2, turn 0, acc 0" in text
    assert "cluster 0, turn 1, acc 1" in text and c // 3 in g["rows"]
    assert text.count("cols ") == 3


def test_multicast_and_pingpong_from_the_twin():
    ok, why = sim_runs.available()
    if not ok:
        pytest.skip(why)
    r = sim_runs.simulate("sm90/05_multicast_a", seed=0)
    d = D.tma_multicast("sm90/05_multicast_a", run=r)
    _legible(d)
    m = D.multicast_of(r)
    ranks = sorted(x["rank"] for x in m["dest"])
    assert len(ranks) == D._stage("sm90/05_multicast_a").exports["cluster_n"]
    # the issue event carries the box's bytes per destination (and how many destinations); each CTA gets one box
    assert all(x["bytes"] == m["issuer"]["bytes"] for x in m["dest"])
    assert m["issuer"].get("dests") in (None, len(m["dest"]))
    # each destination armed its own full[s] for the bytes it receives (what the picture's note says)
    armed = {(e["cta"], e["bar_cta"], e["bytes"]) for e in r.events if e["kind"] == "expect_tx" and e["barrier"] == "full"}
    assert {(d["cta"], d["cta"], d["bytes"]) for d in m["dest"]} <= armed
    mask = sum(1 << k for k in ranks)
    assert f"ctaMask 0b{mask:b}" in _text(d)
    p = D.pingpong("sm90/03c_pingpong")
    _legible(p)
    assert "consumer warpgroup 0" in _text(p) and "consumer warpgroup 1" in _text(p)


def test_run_diagrams_refuse_what_a_stage_lacks(runs):
    with pytest.raises(D.DiagramError, match="one stage"):
        D.ring("nvfp4/00_single_stage")
    with pytest.raises(D.DiagramError, match="cta_group::1"):
        D.pair_signals("fp8/00_ws_cta1")
    with pytest.raises(D.DiagramError, match="does not multicast"):
        D.tma_multicast("fp8/01_cta2", run=runs["fp8/01_cta2"])
    with pytest.raises(D.DiagramError, match="one accumulator"):
        D.overlap("fp8/01_cta2", run=runs["fp8/01_cta2"])
    with pytest.raises(D.DiagramError, match="ping-pong"):
        D.pingpong("sm90/00_tma_wgmma")


def test_pair_diagram_sends_the_commit_to_barriers_not_tmem():
    """The commit of a cta_group::2 MMA arrives on mbarriers (empty[s], the accumulator barrier) in both CTAs;
    an arrow into a TMEM box is the MMA's write. A bare 'commit' label beside the TMEM arrow was the defect."""
    texts = [t for t, _ in _texts(_svg(D.cta_pair("fp8/01_cta2")))]
    assert "writes" in texts
    assert all("empty[s]" in t for t in texts if "commit" in t), [t for t in texts if "commit" in t]
