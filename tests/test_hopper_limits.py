"""pelib.views.hopper_limits: the limiter section's tables and findings, from committed pelib.measure.energy runs (the
real ones and synthetic ones in a scratch results tree)."""
import json
import statistics

import pytest

from pelib import problems
from pelib.views import hopper_limits as hl
from pelib.views.hopper import chip_label

FULL = problems.patch_embed("siglip2")


def _report(device, date, t06=(0.80, 0.70), ghz=(1.50, 1.80), probes=(0.73, 0.73, 0.70), probe_ghz=1.64):
    """A pelib.measure.energy limiter run as the command writes it: 06 on random and zeros (launch clocks), cuBLAS,
    the three probes, sustained rows, Nsight Compute per tile."""
    burst, sus = [], []
    for inputs, ms, g in (("random", t06[0], ghz[0]), ("zeros", t06[1], ghz[1])):
        burst.append({"entry": "06", "inputs": inputs, "round": 0, "plain": {"median_ms": ms},
                      "clocked": {"clock_after_ghz": [1.9]}, "stamped": {"clock_ghz": [g, g]}})
    for name, ms in zip((hl.PROBE_A, hl.PROBE_C, hl.PROBE_NONE), probes):
        burst.append({"entry": name, "inputs": "random", "round": 0, "plain": {"median_ms": ms},
                      "clocked": {"clock_after_ghz": [1.9]}, "stamped": {"clock_ghz": [probe_ghz]}})
    summary = [{"entry": "06", "burst ms (random)": t06[0], "burst ms (zeros)": t06[1], "launch clock (GHz)": ghz[0],
                "clock after (GHz)": 1.9, "sustained ms (random)": 0.96, "J/launch (random)": 0.67, "power W": 696.0,
                "NVML SM MHz": 1358.0},
               {"entry": "10", "burst ms (random)": 0.82, "burst ms (zeros)": 0.72, "sustained ms (random)": 0.98,
                "J/launch (random)": 0.68, "power W": 695.0},
               {"entry": hl.FAST, "burst ms (random)": 0.90, "burst ms (zeros)": 0.82, "sustained ms (random)": 1.08,
                "J/launch (random)": 0.74, "power W": 690.0},
               {"entry": hl.PLAIN, "burst ms (random)": 0.98, "sustained ms (random)": 1.18, "J/launch (random)": 0.82,
                "power W": 696.0}]
    summary += [{"entry": n, "burst ms (random)": ms} for n, ms in zip((hl.PROBE_A, hl.PROBE_C, hl.PROBE_NONE), probes)]
    sus.append({"entry": "06", "inputs": "random", "round": 0, "clock_after_ghz": 1.35,
                "nvml": {"reasons": {"0x4": ["sw_power_cap"]}}})
    return {"env": {"device": device, "date": date, "sm_count": 132}, "evidence": f"measured ({device}, {date[:10]})",
            "problem": "siglip2", "burst": burst, "sustained": sus, "summary": summary, "copy": {"gbps": 4200.0},
            "nvml": {"power_limit_w": 700.0},
            "ncu_per_tile": [{"entry": "06", "sm_clock_ghz": 1.50}, {"entry": hl.FAST, "sm_clock_ghz": 1.64}]}


@pytest.fixture
def tree(tmp_path):
    for chip, dev, t06, ghz in (("h100", "NVIDIA H100 80GB HBM3", (0.94, 0.94), (1.60, 1.80)),
                                ("h200", "NVIDIA H200", (0.80, 0.70), (1.50, 1.79))):
        d = tmp_path / f"2026-12-01-{chip}"
        d.mkdir()
        (d / "energy-limiter.json").write_text(json.dumps(_report(dev, "2026-12-01T10:00:00+00:00", t06, ghz)))
    # a stage list whose stage 05 launched 39 resident clusters of three (as the H100's did)
    (tmp_path / "2026-12-01-h100" / "sm90-stages.json").write_text(json.dumps({"device": "NVIDIA H100", "stages": [
        {"key": "05", "launch": {"grid": 117, "cluster": [3, 1, 1], "persistent": True, "active_clusters": 39}}]}))
    return tmp_path


def test_verdict_tells_a_clock_bound_run_from_a_memory_bound_one(tree):
    h100, h200 = hl.run("h100", root=tree), hl.run("h200", root=tree)
    v1, v2 = hl.verdict(h100), hl.verdict(h200)
    assert not v1["clock_bound"] and v1["time_ratio"] == pytest.approx(1.0) and v1["cycles_ratio"] == pytest.approx(1.8 / 1.6)
    assert v2["clock_bound"] and v2["cycles_ratio"] == pytest.approx(0.70 * 1.79 / (0.80 * 1.50))
    t = hl.power_table(root=tree)
    assert [r["what sets the time"].split(" (")[0] for r in t.rows] == ["not the clock", "the clock"]
    assert t.rows[0]["NVML reasons"] == "0x4" and "measured" in t.caption


def test_missing_runs_name_the_command(tmp_path):
    with pytest.raises(hl.LimiterError, match="python -m pelib.measure.energy limiter"):
        hl.run("h100", root=tmp_path)
    rep = _report("NVIDIA H200", "2026-12-01T10:00:00+00:00")
    rep["burst"] = [b for b in rep["burst"] if b["inputs"] == "random"]
    with pytest.raises(hl.LimiterError, match="launch clock on random and zeros"):
        hl.verdict(rep | {"summary": [{**rep["summary"][0], "burst ms (zeros)": None}]})


def test_cycles_probes_and_the_l2_line(tree):
    rep = hl.run("h200", root=tree)
    t = hl.probe_table(("h200",), root=tree)
    r06, rnone = t.rows[0], t.rows[-1]
    assert r06["M cycles"] == round(0.80 * 1.50, 3) and r06["cycles / tile"] == round(0.80 * 1.50e6 / hl.tiles_per_cta(rep))
    assert hl.tensor_cycles_per_tile("h200") == 2 * 64 * 256 * 768 / 8192 == 3072
    # the two one-stream probes remove the same L2 traffic a tile (A: three reads + the DRAM fill; C: the
    # stores + the write-back), DRAM bytes twofold apart; both probes together remove the sum
    assert hl.removed_by(hl.PROBE_A) == hl.removed_by(hl.PROBE_C) == 64 * 1024
    assert hl.removed_by(hl.PROBE_NONE) == 128 * 1024 and rnone["L2 KiB/tile removed"] == 128
    assert [r["DRAM KiB/tile removed"] for r in t.rows] == [0, 16, 32, 48]
    line = hl.l2_line(rep)
    assert line["ms_per_kib"] == pytest.approx((0.80 - 0.73) / 64) and line["floor_ms"] == 0.70


def test_estimates_are_priced_on_the_line_and_floored(tree):
    t = hl.estimate_table(root=tree)
    by = {(r["chip"], r["stage"]): r for r in t.rows}
    h200 = "H200"
    line = hl.l2_line(hl.run("h200", root=tree))
    r07a = by[(h200, "07a")]
    want = max(line["t06"] - line["ms_per_kib"] * r07a["L2 KiB/tile removed"], line["floor_ms"])
    assert r07a["L2 line ms"] == pytest.approx(want, abs=2e-3) and r07a["SMs"] == 132
    assert by[(h200, "06b")]["L2 KiB/tile removed"] == 0 and by[(h200, "06b")]["L2 line ms"] == 0.80
    for stage in ("06a", "07b"):      # a cluster of three: the SMs of the committed launch of stage 05
        assert by[(h200, stage)]["SMs"] == 117 and by[(h200, stage)]["L2 line ms"] >= round(0.70 * 132 / 117, 3)
    # no stages run yet: the header's phrase is shown, its range and the verdict wait for the run
    assert by[(h200, "11a")]["L2 line ms"] == "—" and by[(h200, "11a")]["verdict"] == "not measured yet"
    assert by[(h200, "07a")]["header says"] == hl.HEADER_ESTIMATES["07a"]["h200"][0]
    assert by[(h200, "07b")]["L2 KiB/tile removed"] > by[(h200, "06a")]["L2 KiB/tile removed"] > 30
    assert "modelled" in t.caption and any("no pelib.measure.energy stages run" in n for n in t.notes)
    n, where = hl.resident_ctas(3, tree)
    assert n == 117 and where.endswith("-h100/sm90-stages.json") and (tree / where.split("/", 1)[1]).is_file()
    assert hl.resident_ctas(4, tree) == (None, "")


def test_tables_read_the_committed_runs():
    """On the committed limiter runs: every table builds, its numbers are the runs' own."""
    for f in (hl.clock_sources_table, hl.regime_table, hl.power_table, hl.energy_table, hl.probe_table,
              hl.gap_table, hl.estimate_table, hl.substage_table, hl.targets_table):
        t = f()
        assert t.rows and ("measured" in t.caption or "modelled" in t.caption), f.__name__
    for chip in hl.CHIPS:
        rep = hl.run(chip)
        lc = statistics.median(c for b in rep["burst"] if b["entry"] == "06" and b["inputs"] == "random"
                               for c in b["stamped"]["clock_ghz"])
        assert hl.launch_clock(rep, "06") == pytest.approx(lc)
        assert hl.clock_of(rep, hl.FAST) == (rep["ncu_per_tile"][[r["entry"] for r in rep["ncu_per_tile"]].index(
            hl.FAST)]["sm_clock_ghz"], "Nsight Compute, one launch")
        e = {r["entry"]: r for r in hl.energy_table((chip,)).rows}
        s = {r["entry"]: r for r in rep["summary"]}
        assert e["06"]["of cuBLAS fast J"] == round(s["06"]["J/launch (random)"] / s[hl.FAST]["J/launch (random)"], 3)
    f = hl.findings()
    assert len(f) == 6 * len(hl.CHIPS) and all("measured (" in x for x in f)
    assert f._repr_markdown_().startswith("**What the limiter runs say")


def _stages_run(device, date, rows, spread=0.004):
    """A pelib.measure.energy stages run as the command writes it: entries, verification, bursts with p10/p90, summary."""
    names = [r["entry"] for r in rows]
    return {"env": {"device": device, "date": date, "sm_count": 132}, "evidence": f"measured ({device}, {date[:10]})",
            "problem": "siglip2", "copy": {"gbps": 4200.0},
            "entries": [{"name": n, "stage": None if n.startswith("cuBLAS") else "sm90/x", "probe": n.startswith("probe")}
                        for n in names],
            "verified": {n: {"ok": True} for n in names if not n.startswith("cuBLAS")},
            "launch": {"06a": {"grid": [117, 1, 1]}},
            "burst": [{"entry": r["entry"], "inputs": "random", "plain": {
                "median_ms": r["burst ms (random)"], "p10_ms": r["burst ms (random)"] - spread,
                "p90_ms": r["burst ms (random)"] + spread}} for r in rows],
            "summary": rows}


def test_estimates_show_the_stages_run_beside_them(tree):
    """Once a pelib.measure.energy stages run is committed, each sub-stage shows its header's range (a relative one
    applied to 06 of that run), its measured burst time, launch clock, joules against cuBLAS fast accumulation
    and the verdict."""
    d = tree / "2026-12-02-h200"
    d.mkdir()
    rows = [{"entry": "06", "burst ms (random)": 0.80, "launch clock (GHz)": 1.50, "J/launch (random)": 0.70},
            {"entry": hl.FAST, "burst ms (random)": 0.90, "J/launch (random)": 0.75},
            {"entry": "07a", "burst ms (random)": 0.77, "launch clock (GHz)": 1.56, "J/launch (random)": 0.645,
             "x cuBLAS fast (burst)": 0.90 / 0.77},
            {"entry": "06b", "burst ms (random)": 0.79, "launch clock (GHz)": 1.51, "J/launch (random)": 0.66},
            {"entry": hl.PROBE_NONE, "burst ms (random)": 0.69, "launch clock (GHz)": 1.66}]
    (d / "energy-stages.json").write_text(json.dumps(_stages_run("NVIDIA H200", "2026-12-02T10:00:00+00:00", rows)))
    t = hl.estimate_table(("h200",), root=tree)
    by = {r["stage"]: r for r in t.rows}
    r = by["07a"]
    assert (r["measured ms"], r["launch GHz"], r["J / GEMM"], r["J / cuBLAS fast J"]) == (0.77, 1.56, 0.645, 0.86)
    # "0 to 2 % on the H200", read as a speed-up over 06 of the same run (0.80 ms)
    assert r["header says"] == "0 to 2 % on the H200" and r["header ms"] == "0.784–0.800"
    assert r["verdict"].startswith("not held: 0.014 ms faster than its range") and "the sign right" in r["verdict"]
    assert by["06b"]["header ms"] == "0.770–0.800" and by["06b"]["verdict"].startswith("held;")
    assert by["06a"]["measured ms"] == "—" and by["06a"]["verdict"] == "not measured yet"
    assert any("2026-12-02-h200/energy-stages.json" in n for n in t.notes)
    # the fastest verified stage of the run, never a probe (faster) or cuBLAS
    st = hl.run("h200", "stages", tree)
    assert hl.best_stage(st) == "07a" and hl.tiles_per_cta_of(st, "06a") == pytest.approx(
        FULL.m / 64 * FULL.n / 256 / 117)


def test_header_estimates_are_the_headers_own_words():
    """Each phrase is in its stage's header verbatim, and reads as the range it says; an edited header is caught."""
    for key, name in hl.SUBSTAGES:
        for chip in hl.CHIPS:
            e = hl.header_estimate(key, name, chip, 1.0)
            assert e["lo"] <= e["hi"] and e["quote"] in " ".join(hl.stages.read_header(key).why.split())
    assert hl.header_estimate("sm90/06a_multicast_a", "06a", "h100", 0.9)["lo"] == 0.84
    e = hl.header_estimate("sm90/11a_two_groups_queued", "11a", "h100", 1.0)
    assert (e["lo"], e["hi"]) == pytest.approx((0.97, 1.02))
    e = hl.header_estimate("sm90/06b_one_prefetcher", "06b", "h200", 0.8)
    assert (e["lo"], e["hi"]) == pytest.approx((0.77, 0.80))
    saved = hl.HEADER_ESTIMATES["07a"]
    try:
        hl.HEADER_ESTIMATES["07a"] = {"h100": ("9 to 10 % faster on the H100", "% faster")}
        with pytest.raises(hl.LimiterError, match="no longer says"):
            hl.header_estimate("sm90/07a_comb_windows", "07a", "h100", 1.0)
    finally:
        hl.HEADER_ESTIMATES["07a"] = saved


def test_verdict_names_sign_and_size():
    est = {"lo": 0.78, "hi": 0.80}
    v = hl.estimate_verdict(est, 0.76, (0.755, 0.765), 0.80, (0.79, 0.81))
    assert not v["held"] and v["off_ms"] == pytest.approx(-0.02) and v["sign_right"]
    assert "2.0x the largest change estimated" in v["text"]
    v = hl.estimate_verdict(est, 0.86, (0.85, 0.87), 0.80, (0.79, 0.81))
    assert not v["held"] and v["sign_right"] is False and "the sign wrong" in v["text"]
    v = hl.estimate_verdict({"lo": 0.70, "hi": 0.75}, 0.805, (0.74, 0.82), 0.80, (0.79, 0.81))
    assert v["held"] and v["no_change"] and v["text"].startswith("held within the run's spread")
    assert hl.estimate_verdict(est, 0.79, (0.79, 0.79), 0.80)["text"].startswith("held;")


def test_targets_read_the_committed_stages_runs():
    """On the committed runs: one row per target and chip, each met or missed by the numbers of its run."""
    t = hl.targets_table()
    assert len(t.rows) == 3 * len(hl.CHIPS) and "measured" in t.caption
    for chip in hl.CHIPS:
        st = hl.run(chip, "stages")
        best = hl.best_stage(st)
        s = {r["entry"]: r for r in st["summary"]}
        rows = [r for r in t.rows if r["chip"] == chip_label(st["env"]["device"])]
        ms, fast = s[best]["burst ms (random)"], s[hl.FAST]["burst ms (random)"]
        assert ms == min(s[n]["burst ms (random)"] for n in s if n in {e["name"] for e in st["entries"]
                                                                        if e["stage"] and not e["probe"]})
        assert rows[0]["met"] == ("met" if ms <= hl.TARGET_MS[chip] else "missed")
        assert rows[1]["met"] == ("met" if fast / ms >= hl.TARGET_X else "missed")
        assert rows[2]["met"] == ("met" if s[best]["J/launch (random)"] < s[hl.FAST]["J/launch (random)"] else "missed")


def test_chip_column_names_the_model():
    assert chip_label("NVIDIA H100 80GB HBM3") == "H100" and chip_label("NVIDIA H200") == "H200"
    assert chip_label("Some GPU") == "Some GPU"
