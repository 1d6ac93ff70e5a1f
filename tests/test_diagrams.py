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
