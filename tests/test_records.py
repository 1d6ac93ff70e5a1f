"""pelib.records: the lab notes as typed records, their provenance and their consistency checks."""
import dataclasses
import os
import pathlib
import re

import pytest

from pelib import records as R
from pelib import records_audit as A

NOTES = {"fp8-megakernel-experiment-log.md", "fp8-megakernel-future-proposals-F21-F28.md",
         "fp8-megakernel-w1-stall-isolation.md", "nvfp4-dual-gemm-tma-store-epilogue-pitch.md",
         "nvfp4-gemm-optimization-log.md"}


def _all_sources():
    out = set()

    def walk(o, note=None):
        if isinstance(o, dict):
            n = o.get("note", note)
            if "section" in o:
                out.add((n, o["section"]))
            for v in o.values():
                walk(v, n)
        elif isinstance(o, list):
            for v in o:
                walk(v, note)

    for f in R.FILES.values():
        if f != "inconsistencies.yaml":
            walk(R.load(f))
    return out


def test_every_table_names_a_lab_note_and_section():
    srcs = _all_sources()
    assert len(srcs) > 50
    for note, section in srcs:
        assert note in NOTES, note
        assert section and isinstance(section, str)


# The lab notes sit beside a checkout in ../shared/lab-notes; PELIB_LAB_NOTES points elsewhere.
_NOTES_DIR = pathlib.Path(os.environ.get("PELIB_LAB_NOTES",
                                         pathlib.Path(__file__).resolve().parents[2] / "shared" / "lab-notes"))


@pytest.mark.skipif(not _NOTES_DIR.is_dir(), reason="lab notes not found: set PELIB_LAB_NOTES to their folder")
def test_sections_exist_in_the_notes():
    root = _NOTES_DIR
    for note, section in _all_sources():
        text = (root / note).read_text()
        for part in section.split(" / "):
            assert part in text or re.sub(r" \([^)]*\)$", "", part) in text, (note, part)


def test_loaders_return_dataclasses():
    for fn in (R.history, R.later_states, R.cublas, R.experiments, R.ruled_out, R.ncu, R.instruction_budgets,
               R.w1_stalls, R.phases, R.f25_warps, R.equilibria, R.nvfp4_stage_steps, R.nvfp4_stage_times,
               R.nvfp4_split_k, R.nvfp4_attempts, R.tma_store_estimates):
        rows = fn()
        assert rows, fn.__name__
        assert all(dataclasses.is_dataclass(r) for r in rows), fn.__name__
        assert all(isinstance(r.source, R.Source) and r.source.note in NOTES for r in rows), fn.__name__
    assert dataclasses.is_dataclass(R.smem_budget())
    assert R.history()[0].source.label == "recorded (fp8-megakernel-experiment-log.md)"


def test_fp8_history():
    h = R.history()
    assert [x.commit for x in h][:3] == ["6c327fe", "c5f6c8b", "4ff9644"] and h[-1].commit == "d882aba"
    assert len(h) == 13
    assert (h[-1].ms, h[-1].tflops, h[-1].regs) == (0.630, 1739, 222)
    assert [x.approx for x in h[:3]] == [True, True, True]
    later = {s.state.split(" (")[0]: s for s in R.later_states()}
    assert later["5-warp baseline"].ms == 0.579
    assert (later["F18"].ms, later["F18"].tflops, later["F18"].regs) == (0.543, 2018, 223)
    assert (later["F19a"].ms, later["F19a"].tflops) == (0.542, 2020)
    assert [r.ms for r in R.cublas()[:2]] == [0.365, 0.835]


def test_tflops_agrees_with_ms():
    rows = [x for x in R.history() + R.later_states() if x.ms and x.tflops]
    assert len(rows) == 7
    for x in rows:
        assert A.tflops_consistent(x.ms, x.tflops), x
    # the check can fail: a TFLOPS that no rounding of 0.630 ms explains
    assert not A.tflops_consistent(0.630, 1745)
    assert not A.tflops_consistent(0.543, 2030)


def test_failed_experiments():
    e = {x.id: x for x in R.experiments()}
    assert list(e) == [f"F{i}" for i in range(1, 10)]
    assert e["F1"].result_range == (0.663, 0.665) and e["F1"].result_regs == 213 and e["F1"].verdict == "REJECTED"
    assert (e["F2"].result_ms, e["F2"].result_regs) == (0.858, 246)
    assert e["F3"].result_ms == 0.747 and e["F9"].verdict == "IMPOSSIBLE"
    assert e["F6"].extra["also"] == {"stages": 5, "ms": 0.715, "regs": 236}
    assert all(x.verdict for x in e.values())
    ro = R.ruled_out()
    assert {r.id for r in ro} >= {"F20", "F19b", "F13", "F17", "F12"}


def test_ncu_tables():
    m = {(x.table, x.metric): x for x in R.ncu()}
    assert (m["stalls", "selected"].baseline, m["stalls", "selected"].after) == (14.1, 19.1)
    assert (m["memory", "l1tex"].baseline, m["memory", "l1tex"].after) == (82, 85)
    assert m["uncoalesced", "global_store_instructions"].after == 3480960
    assert m["compare", "l1_hit_rate_pct"].after == 33.6
    assert m["build", "registers_per_thread"].after == 222


def test_smem_budget_flags_its_missing_128_bytes():
    b = R.smem_budget()
    assert [c.bytes for c in b.components] == [131072, 128, 84480]
    assert b.total == 215808 and b.sm_limit == 233472
    assert b.component_sum == 215680 and b.unaccounted == 128
    assert b.headroom == 17664
    f = {x.check: x for x in A.checks()}["smem.sum"]
    assert not f.ok
    assert "smem.sum" in A.flagged()


def test_w1_budget_and_reconciliation():
    b = {x.version: x for x in R.instruction_budgets()}
    assert b["5-warp baseline"].total == 475 == sum(c.count for c in b["5-warp baseline"].categories)
    assert b["current (F28 analysis)"].total == 411
    rec = R.w1_reconciliation()
    assert rec["W1"] == {"tma0_wait": 856, "kloop": 4155, "epi_wait": 1052}
    assert rec["W3"] == {"phase1": 4140, "phase2b": 899, "ml_wait": 1123}


def test_clock64_phase_numbers():
    assert R.phase_range("tma0_wait") == (856, 857)
    assert R.phase_range("kloop") == (4154, 4155)
    assert R.phase_range("phase1") == (4129, 4288)
    assert R.phase_range("ml_wait") == (1123, 1139)
    assert R.phase_range("epi_wait") == (1052, 1162)
    eq = {e.label: e for e in R.equilibria()}
    assert eq["header"].deficit == 403 and eq["F28 analysis"].deficit == 257
    w = R.f25_warps()
    assert [x.avg for x in w] == [4252, 4288, 4424, 4392]
    assert max(x.avg for x in w) - min(x.avg for x in w) == 172
    with pytest.raises(KeyError):
        R.phase_range("nope")


def test_nvfp4_stage_tables():
    sweep = R.nvfp4_stage_sweep()
    assert sweep["k16384"] == {1: 96.8, 2: 64.9, 3: 54.4, 4: 50.1, 5: 49.3}
    assert sweep["k7168"] == {1: 51.6, 2: 38.3, 3: 33.4, 4: 31.1, 5: 30.8}
    assert sweep["k2048"] == {1: 37.6, 2: 32.9, 3: 31.9, 4: 31.4, 5: 30.9}
    t = R.nvfp4_stage_times()
    six = [x for x in t if x.stages == 6]
    assert {(x.table, x.us) for x in six} == {("additional", 49.4), ("adaptive", 49.5)}
    assert R.nvfp4_sol_us() == {"k16384": 8.994, "k7168": 2.354, "k2048": 1.333}
    sk = {(x.split, x.shape): x.us for x in R.nvfp4_split_k()}
    assert sk[4, "k16384"] == 81.6 and sk[2, "k2048"] == 43.1
    names = " ".join(a.name + " " + a.outcome for a in R.nvfp4_attempts())
    for s in ("multicast", "2-CTA", "M tile", "N tile", "K tile", "7-stage pipeline timeout", "split-K"):
        assert s in names, s


def test_tma_store_estimates():
    est = R.tma_store_estimates()
    tot = {}
    for e in est:
        tot[e.variant] = tot.get(e.variant, 0) + e.cycles
    assert tot == {"SIMT": 510, "TMA store": 130}


def test_checks_and_flags_match_exactly():
    fs = A.checks()
    assert len(fs) > 150
    assert A.unexplained() == {"failed_not_flagged": [], "flagged_not_failed": []}
    bad = A.inconsistencies()
    assert {b.kind for b in bad} <= {"value", "label", "arithmetic", "rounding"}
    # the stage tables agree except where the log itself disagrees
    assert {b.check for b in bad if b.check.startswith("nvfp4.chain")} == set()
    assert "nvfp4.constexpr.k16384.third" in {b.check for b in bad}
    assert "24 fail" in A.report() or f"{len(bad)} fail" in A.report()


def test_a_new_inconsistency_is_not_hidden(monkeypatch):
    import copy

    raw = copy.deepcopy(R.load("history"))
    raw["history"]["rows"][-1]["tflops"] = 1800          # no longer 2·M·N·K / 0.630 ms
    real = R.load

    def fake(name):
        return raw if name == "history" else real(name)

    monkeypatch.setattr(R, "load", fake)
    u = A.unexplained()
    assert "history.tflops.d882aba" in u["failed_not_flagged"]
    assert "state.headline_is_last_commit" in u["failed_not_flagged"]


def test_a_fixed_inconsistency_is_noticed(monkeypatch):
    import copy

    raw = copy.deepcopy(R.load("smem"))
    raw["budget"]["total"] = 215680
    real = R.load
    monkeypatch.setattr(R, "load", lambda name: raw if name == "smem" else real(name))
    assert "smem.sum" in A.unexplained()["flagged_not_failed"]


def test_recorded_facts_for_gonogo():
    from pelib import gonogo
    f = {x.metric: x for x in gonogo.recorded_facts()}
    assert f["f25.phase1_spread_avg_cycles"].value == 172 and f["f25.phase1_spread_avg_cycles"].kind == "recorded"
    assert f["baseline.registers"].value == 223
