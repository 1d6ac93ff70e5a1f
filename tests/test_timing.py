"""Timing decoder on synthetic records, and the phase enum shared with common/timing.cuh."""
import re

import numpy as np
import pytest

from pelib import events, timing as T


def test_phases_parsed_from_header():
    ph = T.phases()
    assert ph[0] == "producer_wait" and "kloop" in ph.values() and "epi_phase1" in ph.values()
    text = events.HEADER.read_text()
    count = int(re.search(r"PE_PHASE_COUNT\s*=\s*(\d+)", text).group(1))
    assert len(ph) == count
    assert T.phase_id("kloop") == [k for k, v in ph.items() if v == "kloop"][0]
    assert "K-loop" in T.phase_notes()["kloop"]


def synthetic(ctas=2, warps=4, tiles=3):
    lay = T.Layout(ctas, warps, tiles, len(T.phases()))
    buf = np.zeros(lay.words, dtype=np.int64).reshape(ctas, warps, tiles, lay.phases, 2)
    kl, e1 = T.phase_id("kloop"), T.phase_id("epi_phase1")
    for c in range(ctas):
        for w in range(warps):
            for t in range(tiles):
                base = 10_000 * (t + 1) + 7 * c
                buf[c, w, t, kl] = (base, base + 1000 * (w + 1) + t)         # 1000(w+1) + t cycles
                buf[c, w, t, e1] = (base + 5000, base + 5000 + 500)
    return lay, buf.reshape(-1)


def test_decode_per_warp_phase():
    lay, buf = synthetic()
    t = T.decode(buf, lay)
    pw = t.per_warp()
    s = pw[(2, "kloop")]
    assert s["n"] == 2 * 3
    assert s["avg"] == pytest.approx(3000 + 1.0)       # tiles add 0,1,2 -> mean 1
    assert s["min"] == 3000 and s["max"] == 3002
    assert (0, "producer_wait") not in pw                # never recorded
    summ = t.summary()
    assert summ["kloop"]["spread"] == pytest.approx(3000)   # warp 3 avg - warp 0 avg
    assert summ["epi_phase1"]["spread"] == 0
    assert np.isnan(t.durations[0, 0, 0, T.phase_id("tma_wait")])
    assert "kloop" in t.table() and "cycles" in t.table()


def test_p95():
    lay = T.Layout(1, 1, 16, len(T.phases()))
    buf = np.zeros((1, 1, 16, lay.phases, 2), dtype=np.int64)
    kl = T.phase_id("kloop")
    for i in range(16):
        buf[0, 0, i, kl] = (100, 100 + (i + 1) * 10)
    s = T.decode(buf.reshape(-1), lay).per_warp()[(0, "kloop")]
    assert s["p95"] == pytest.approx(np.percentile(np.arange(1, 17) * 10, 95))


def test_decode_size_mismatch():
    lay, buf = synthetic()
    with pytest.raises(ValueError, match="needs"):
        T.decode(buf[:-2], lay)


def test_layout_from_build_requires_timing():
    class B:
        exports = {"smem_bytes": 0}
        class source:
            name = "x.cu"
    with pytest.raises(ValueError, match="TIMING"):
        T.layout(B(), 4)
    B.exports = {"timing_warps": 4, "timing_tiles": 2, "timing_phases": len(T.phases()), "timing_clock": 0}
    lay = T.layout(B(), 3)
    assert lay.words == 3 * 4 * 2 * len(T.phases()) * 2


def test_plot_title_names_evidence():
    import matplotlib
    matplotlib.use("Agg")
    lay, buf = synthetic()
    ax = T.plot(T.decode(buf, lay), "measured, synthetic test data")
    assert "measured, synthetic test data" in ax.get_title()
    assert len(ax.patches) == 2 * 4      # two phases x four warps


# ---- the launch clock (PE_TIMING_CTA) --------------------------------------------------------------

def clock_block(ctas=4, warps=3, ghz=(1.5, 1.2, 1.5, 1.2), sms=(0, 1, 0, 1), ns=100_000, skew=True):
    """A synthetic launch-clock block: CTA c runs `ns` on SM sms[c] at ghz[c] (one clock per SM); CTAs on one
    SM follow each other."""
    b = np.zeros((ctas, warps, T.CLOCK_WORDS), np.int64)
    t_sm = {}
    for c in range(ctas):
        g0 = 1_000_000 + t_sm.get(sms[c], 0)
        c0 = 5_000_000 * (sms[c] + 1) + int(t_sm.get(sms[c], 0) * ghz[c])
        t_sm[sms[c]] = t_sm.get(sms[c], 0) + ns
        for w in range(warps):
            late = 10 * w if skew else 0                 # warps leave at different times; the last one counts
            b[c, w] = (c0 + 3 * w, g0 + 2 * w, c0 + int((ns - 100 + late) * ghz[c]) + 100, g0 + ns - 100 + late + 100,
                       sms[c] + 1)
    return b


def test_launch_clock_per_cta_and_per_sm():
    out = T.launch_clock(clock_block())
    assert out["per_cta_ghz"]["min"] == pytest.approx(1.2, rel=1e-3)
    assert out["per_cta_ghz"]["max"] == pytest.approx(1.5, rel=1e-3)
    assert out["sms"] == 2 and out["ctas"] == 4
    assert out["per_sm_ghz"]["n"] == 2
    assert out["span_ns"] == pytest.approx(2 * 100_000 + 20, abs=30)
    assert out["per_sm_ghz"]["min"] == pytest.approx(1.2, rel=1e-3) and out["ghz"] == pytest.approx(1.35, rel=1e-3)


def test_launch_clock_ignores_unrecorded_warps_and_says_when_nothing_was_recorded():
    b = clock_block(ctas=2, ghz=(1.4, 1.4), sms=(0, 1))
    b[:, 2] = 0                                    # a warp beyond PE_TIMING_WARPS: never recorded
    b[1, 1, 2:4] = 0                               # a warp that never exited: ignored
    assert T.launch_clock(b)["per_cta_ghz"]["median"] == pytest.approx(1.4, rel=1e-2)
    with pytest.raises(ValueError, match="PE_TIMING_CTA"):
        T.launch_clock(np.zeros((2, 3, T.CLOCK_WORDS), np.int64))
    with pytest.raises(ValueError, match="shape"):
        T.launch_clock(np.zeros((2, 3, 4), np.int64))


def test_decode_splits_the_launch_clock_block_and_save_load_keeps_it(tmp_path):
    lay0, buf0 = synthetic(ctas=2, warps=3, tiles=3)
    lay = T.Layout(2, 3, 3, len(T.phases()), 0, T.CLOCK_WORDS)
    blk = clock_block(ctas=2, warps=3, ghz=(1.3, 1.3), sms=(4, 5))
    buf = np.concatenate([buf0, blk.reshape(-1)])
    assert lay.words == buf.size
    t = T.decode(buf, lay)
    assert (t.start == T.decode(buf0, lay0).start).all() and (t.cta_clock == blk).all()
    assert t.launch_clock()["ghz"] == pytest.approx(1.3, rel=1e-2)
    back = T.load(t.save(tmp_path / "r.npz", device="test"))
    assert back.layout == lay and (back.cta_clock == blk).all()
    with pytest.raises(ValueError, match="no launch clock"):
        T.decode(buf0, lay0).launch_clock()


def test_layout_reads_the_clock_words_and_refuses_another_count():
    class B:
        exports = {"timing_warps": 4, "timing_tiles": 2, "timing_phases": len(T.phases()), "timing_clock": 0,
                   "timing_clock_words": T.CLOCK_WORDS}
        class source:
            name = "x.cu"
    lay = T.layout(B(), 3)
    assert lay.words == 3 * 4 * 2 * len(T.phases()) * 2 + 3 * 4 * T.CLOCK_WORDS
    B.exports = {**B.exports, "timing_clock_words": 7}
    with pytest.raises(ValueError, match="rebuild"):
        T.layout(B(), 3)


def test_header_block_matches_the_decoder():
    """PE_CLOCK_WORDS and the field order in common/timing.cuh are the decoder's."""
    text = T.HEADER.read_text()
    assert int(re.search(r"#define PE_CLOCK_WORDS (\d+)", text).group(1)) == T.CLOCK_WORDS
    assert "{ clock64 begin, globaltimer begin, clock64 end, globaltimer end, smid + 1 }" in text


def test_committed_records_from_before_the_launch_clock_still_load():
    from pelib.paths import ROOT
    t = T.load(ROOT / "results/2026-11-24-h100/trace-sm90-06.records.npz")
    assert t.cta_clock is None and t.layout.clock_words == 0 and t.recorded.any()


def test_every_timed_stage_opens_with_the_launch_clock():
    """Every kernel that records phases also records its launch clock (PE_TIMING_CTA as its first statement)."""
    from pelib.paths import KERNELS
    for f in KERNELS.rglob("*.cu"):
        text = f.read_text()
        if "common/timing.cuh" not in text or "sim" in f.parts:
            continue
        m = re.search(r"\bu64\*\s*timing\b[^{;)]*\)\s*\{", text)   # the last parameter(s) and the body's brace
        assert m, f"{f}: the kernel takes 'u64* timing'"
        assert text[m.end():].lstrip().startswith("PE_TIMING_CTA(timing);"), f"{f}: open the kernel with PE_TIMING_CTA(timing);"
