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
