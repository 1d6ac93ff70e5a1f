"""pelib.predict.costs: the one table of the timing model's costs, and the checks it gives every calibration on
load (the bad values a skeptical reader tried: NaN, infinity, negative latencies, 1e300, 0 SMs, a chip named by a
fragment, costs of a chip that cannot run the stage)."""
from __future__ import annotations

import json

import pytest

from pelib.predict import calibration as C, costs, measured as M, model
from pelib.stage import Stage


def _with(tmp_path, **values):
    doc = C.load("h100").to_json()
    for k, v in values.items():
        doc["constants"][k.replace("__", ".")]["value"] = v
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc))
    return p


def test_the_table_is_what_the_calibration_requires():
    assert set(C.REQUIRED) == {n for n, c in costs.COSTS.items() if c.required == "always"}
    assert all(c.reads and c.source and c.unit for c in costs.COSTS.values())
    for chip in ("h100", "h200", "b200"):       # every committed calibration passes its own table
        C.load(chip)


@pytest.mark.parametrize("name,value,says", [
    ("tma.l2_latency_cycles", float("nan"), "not finite"),          # PR07: a NaN priced a load at nothing
    ("dram.bandwidth_gbps", float("inf"), "not finite"),            # PR08
    ("tma.l2_latency_cycles", -700.0, "negative"),                  # PR09
    ("cta.launch_cycles", -2000.0, "negative"),
    ("launch.overhead_us", -4.0, "negative"),
    ("tma.issue_cycles", 1e300, "above its range"),                 # PR13: the replay's buckets hung at 1e300
    ("sm_count", 0.0, "below its range"),                           # PR11: 0 SMs fell back to 132
    ("clock_ghz.timed", 0.0, "below its range"),                    # CL05
    ("dram.bandwidth_gbps", 1e9, "above its range"),
])
def test_a_bad_cost_is_refused_on_load_and_on_change(tmp_path, name, value, says):
    with pytest.raises(C.CalibrationError, match=says):
        C.load(_with(tmp_path, **{name.replace(".", "__"): value}))
    with pytest.raises(C.CalibrationError, match=says):
        C.load("h100").with_values(**{name.replace(".", "__"): value})


def test_a_measured_file_with_a_bad_value_is_refused(tmp_path):
    """PR16, PR17, CL07: a NaN or a negative measured constant never becomes a "measured" cost."""
    from pelib.paths import ROOT
    src = ROOT / "results/2026-11-27-h100/calibration-nvidia-h100-80gb-hbm3.json"
    for name, value in (("mbarrier.arrive_cycles", -50.0), ("tma.load.latency_cycles.l2", float("nan"))):
        doc = json.loads(src.read_text())
        doc["constants"][name]["value"] = value
        p = tmp_path / "meas.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(C.CalibrationError, match="unusable|not finite|negative"):
            M.resolve(str(p), "h100")


def test_a_chip_is_named_exactly():
    """CL06: 'h' and '200' loaded the H200's costs without a word."""
    for bad in ("h", "200", "H1"):
        with pytest.raises(C.CalibrationError, match="name one of"):
            C.load(bad)
    assert C.load("H100").chip == "h100"


def test_a_measured_file_of_another_chip_is_refused(tmp_path):
    """PR18: an H100 measurement relabelled as an A100 (108 SMs) was priced as the A100 over the H100's
    provisional costs, with exit status 0: a file's own device must be the chip whose costs it replaces."""
    from pelib.paths import ROOT
    doc = json.loads((ROOT / "results/2026-11-27-h100/calibration-nvidia-h100-80gb-hbm3.json").read_text())
    doc["env"]["device"], doc["env"]["sm_count"] = "NVIDIA A100-SXM4-80GB", 108
    p = tmp_path / "meas_a100.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(C.CalibrationError, match=r"measured on 'NVIDIA A100-SXM4-80GB' \(chip 'a100'\).*h100"):
        M.resolve(str(p), "h100")
    doc["env"]["device"] = "NVIDIA H200"         # a measured chip the model knows: told which --gpu to pass
    p.write_text(json.dumps(doc))
    with pytest.raises(C.CalibrationError, match="pass --gpu h200"):
        M.resolve(str(p), "h100")


def test_a_calibration_that_is_not_a_file_is_named_as_such(tmp_path):
    """PR20, CL04: a folder and /dev/null were read as chip names ('no chip ...'), None was a raw TypeError, ''
    was 'no calibration file .'."""
    from pelib.predict import measured_format as F
    with pytest.raises(C.CalibrationError, match="is a folder, not a calibration file"):
        C.load(tmp_path)
    with pytest.raises(C.CalibrationError, match="is a folder, not a calibration file"):
        F.load(tmp_path)
    with pytest.raises(C.CalibrationError, match="not a regular file"):
        C.load("/dev/null")
    for bad in (None, "", "  ", 42):
        with pytest.raises(C.CalibrationError, match="name a chip|pass the path"):
            (C.load if bad != "" else F.load)(bad)
        with pytest.raises(C.CalibrationError, match="pass the path"):
            F.load(bad)


def test_a_negative_measured_constant_is_refused_by_the_file_format(tmp_path):
    """CL03: measured_format.load took dram.copy_gbps -3000 and mbarrier.arrive_cycles -50 (only the model's
    later check refused them)."""
    from pelib.paths import ROOT
    from pelib.predict import measured_format as F
    doc = json.loads((ROOT / "results/2026-11-27-h100/calibration-nvidia-h100-80gb-hbm3.json").read_text())
    assert F.problems(doc) == []
    doc["constants"]["dram.copy_gbps"]["value"] = -3000.0
    doc["constants"]["mbarrier.arrive_cycles"]["value"] = -50.0
    p = tmp_path / "meas_neg.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(C.CalibrationError) as e:
        F.load(p)
    assert "'dram.copy_gbps': value -3000.0 is negative" in str(e.value)
    assert "'mbarrier.arrive_cycles': value -50.0 is negative" in str(e.value)


def test_costs_of_a_chip_that_cannot_run_the_stage_are_refused():
    """PR03 / PR04: sm_90a code on B200 costs, tcgen05 code on H100 costs, unless the prediction says TRANSFERRED."""
    with pytest.raises(model.PredictError, match="sm_90a code.*b200"):
        model.predict(Stage("sm90/06_permuted_b"), "b200")
    with pytest.raises(model.PredictError, match="sm_100a code.*h100"):
        model.predict(Stage("fp8/00_ws_cta1"), "h100")


def test_an_unknown_chip_in_a_file_is_refused(tmp_path):
    """PR18: a calibration relabelled as another chip."""
    doc = C.load("h100").to_json()
    doc["chip"] = "a100"
    p = tmp_path / "a100.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(C.CalibrationError, match="chip 'a100'"):
        C.load(p)


def test_an_optional_cost_reads_its_default_or_fallback_from_the_table():
    cal = C.load("h100")
    assert "umma.commit_cycles" not in cal.constants and "tmem.ld_cycles" not in cal.constants
    assert cal.cost("umma.commit_cycles") == cal["mbarrier.wake_cycles"]          # its fallback cost
    assert cal.cost("tmem.ld_cycles") == costs.COSTS["tmem.ld_cycles"].default == 0.0
    assert cal.cost("bar_sync.cycles") == cal["bar_sync.cycles"]
    with pytest.raises(KeyError, match="no cost of pelib.predict.costs"):
        cal.cost("tma.warp_speed")
    for c in costs.COSTS.values():        # a fallback names a cost of the table, an optional cost has a way out
        assert c.fallback is None or c.fallback in costs.COSTS
        assert c.required != "optional" or c.default is not None or c.fallback or c.name.startswith(
            ("clock_ghz.", "tensor.fp4", "lsu.", "sb.", "shfl.")), c.name   # lsu.*: absent, stores go by their
        # bytes; sb.*, shfl.*: absent, no instruction waits on a scoreboard


def test_the_replay_has_no_default_of_its_own_for_a_cost():
    """Costs are read as cal[name] or cal.cost(name): a default written beside a read would hide from the table."""
    import re
    from pathlib import Path
    here = Path(model.__file__).parent
    for f in ("replay.py", "model.py", "memory.py", "price.py"):
        text = (here / f).read_text()
        assert not re.search(r"\bcal\.get\(", text), f"{f} reads a cost with a default of its own"


def test_the_load_store_path_takes_all_six_costs_or_none():
    """replay.lsu_cycles: a calibration prices warp-wide accesses with all six lsu costs or none (then stores go
    by their bytes); a width between two measured ones takes the line between them."""
    from pelib.predict import replay
    import dataclasses
    cal = C.load("h100")
    cal = dataclasses.replace(cal, constants={k: v for k, v in cal.constants.items() if not k.startswith("lsu.")})
    assert replay.lsu_cycles(cal) is None
    six = {f"lsu.{op}_cycles.{w}B": 10.0 + w + (0 if op == "store" else 100) for op in ("store", "load")
           for w in (4, 8, 16)}

    def adding(consts):
        return dataclasses.replace(cal, constants={**cal.constants, **{
            k: {"value": v, "unit": "cycles", "kind": "measured", "source": "test"} for k, v in consts.items()}})
    full = adding(six)
    lsu = replay.lsu_cycles(full)
    assert lsu[("store", 16)] == 26.0 and lsu[("load", 4)] == 114.0
    assert replay.lsu_access_cycles(lsu, "store", 2) == 14.0            # narrower than 4 B: the 4-B cost
    assert replay.lsu_access_cycles(lsu, "store", 12) == pytest.approx(22.0)   # between 8 and 16
    assert replay.lsu_access_cycles(lsu, "load", 32) == 2 * 126.0       # wider: per 16 B
    part = adding({k: v for k, v in six.items() if "store" in k})
    with pytest.raises(KeyError, match="all six"):
        replay.lsu_cycles(part)


def test_the_control_field_names_the_scoreboards_an_instruction_sets_and_waits_on():
    """sass_paths.control: bits 105-127 of the instruction; stall 4 bits, yield 1, write scoreboard 3, read 3,
    wait mask 6. The no-op padding's field 0x7e0 sets and waits on none."""
    from pelib.predict import sass_paths as sp
    pad = sp.LInstr(0, 0, "NOP", 0, None, False, False, "NOP", 1, 0x7E0)
    assert pad.write_sb is None and pad.wait_mask == 0
    ctrl = 4 | (3 << 5) | (7 << 8) | (0b100101 << 11)         # stall 4, writes scoreboard 3, waits on 0, 2, 5
    assert sp.control(ctrl << 41) == ctrl and sp.stall(ctrl << 41) == 4
    i = sp.LInstr(0, 0, "SHFL.BFLY", 0, None, False, False, "SHFL.BFLY", 4, ctrl)
    assert i.write_sb == 3 and i.wait_mask == 0b100101


def _instr(k, op, stall=1, wr=7, wait=0):
    from pelib.predict import sass_paths as sp
    return sp.LInstr(k, 16 * k, op, 0, None, False, False, op, stall, stall | (wr << 5) | (7 << 8) | (wait << 11))


def test_a_segment_carries_its_scoreboard_marks_and_a_wait_before_an_access():
    from pelib.predict import sass_paths as sp
    ins = [_instr(0, "SHFL.BFLY", 2, wr=0), _instr(1, "IADD3", 1), _instr(2, "SEL", 1, wait=0b1),
           _instr(3, "LDG.E.128", 1, wr=1), _instr(4, "STG.E.128", 1, wait=0b10), _instr(5, "MUFU.EX2", 1, wr=2)]
    prog = sp.program(ins, tuple(range(6)), 6)
    assert prog[0] == ("alu", 3, 4, (("set", 0, 0, 0, "shfl"), ("wait", 2, 3, 0b1)))
    assert prog[1] == ("ldg", 16, 1) and prog[2] == ("sbwait", 0b10) and prog[3] == ("stg", 16)
    assert prog[4] == ("alu", 1, 1)       # MUFU's scoreboard is not priced: no mark


def test_a_scoreboard_wait_waits_for_the_producers_latency_and_the_shuffle_unit():
    """Replay._alu_marked: the run issues up to its wait, waits until the shuffle's result (its latency after it
    issued), and goes on; without sb latencies the run is one issue (as before the marks)."""
    from collections import defaultdict
    from pelib.predict import replay
    r = replay.Replay.__new__(replay.Replay)
    r.used, r.slots, r.sm_of, r.shfl_used = defaultdict(dict), 1.0 * replay.BUCKET, {}, defaultdict(dict)
    r.sb_lat = {"shfl": 30.0, "lds": 33.0, "ldg": 300.0, "shfl_sm": 2.0}
    w = replay._Warp((0, 0), [])
    item = ("alu", 3, 4, (("set", 0, 0, 0, "shfl"), ("wait", 2, 3, 0b1)))
    r._alu_marked(w, item)
    assert w.t == pytest.approx(30 + 1) and 0 not in w.sb          # waited to 30, then the SEL's one cycle
    assert any(s.cat == "latency" and s.t0 == pytest.approx(3) and s.t1 == pytest.approx(30) for s in w.log)
    assert r.shfl_used[0][0] == 2.0                                 # the SM's shuffle unit: 2 cycles claimed
    r.shfl_used[0][0] = float(replay.BUCKET)                        # its first bucket full (other warps' shuffles)
    w2 = replay._Warp((0, 4), [])                                   # a warp on another scheduler, same SM
    r._alu_marked(w2, ("alu", 1, 1, (("set", 0, 0, 0, "shfl"),)))
    assert w2.sb[0] == pytest.approx(replay.BUCKET + 30)            # taken in the next bucket, then its latency
    r.sb_lat = None
    w3 = replay._Warp((0, 1), [])
    r.cal = None
    assert r._item(w3, item) and w3.t == pytest.approx(4)


def test_instruction_latencies_come_together_with_the_shuffle_rate():
    from pelib.predict import replay
    import dataclasses
    cal = C.load("h100")
    base = {k: v for k, v in cal.constants.items() if not k.startswith(("sb.", "shfl."))}

    def with_(**v):
        return dataclasses.replace(cal, constants={**base, **{k.replace("__", "."): {
            "value": x, "unit": "cycles", "kind": "measured", "source": "test"} for k, x in v.items()}})
    assert replay.sb_latencies(with_()) is None
    with pytest.raises(KeyError, match="lacks"):
        replay.sb_latencies(with_(sb__latency_cycles__shfl=30.0))
    with pytest.raises(KeyError, match="shuffle rate"):
        replay.sb_latencies(with_(sb__latency_cycles__shfl=30.0, sb__latency_cycles__lds=33.0))
    got = replay.sb_latencies(with_(sb__latency_cycles__shfl=30.0, sb__latency_cycles__lds=33.0, shfl__cycles_sm=2.0))
    assert got == {"shfl": 30.0, "lds": 33.0, "ldg": cal["ldg.latency_cycles"], "shfl_sm": 2.0}


def test_a_spill_is_an_access_of_the_load_store_path_and_its_reload_a_wait():
    """sass_paths.program: a register spill's STL and its reload's LDL are items of their own, an LDL with its
    scoreboard and a wait before a spill that waits; the replay puts each on the SM's load/store path for the
    lsu probe's coalesced ("line") cost of its width, logs a wait for the path as "local", and an LDL's result
    is ready the shared-memory latency after it issued. Without the four local costs a spill is its issue."""
    from collections import defaultdict
    import dataclasses
    from pelib.predict import replay, sass_paths as sp
    ins = [_instr(0, "STL.64", 1, wait=0b1), _instr(1, "LDL", 1, wr=3), _instr(2, "FFMA", 1, wait=0b1000)]
    prog = sp.program(ins, tuple(range(3)), 3)
    assert prog == (("sbwait", 0b1), ("stl", 8), ("ldl", 4, 3), ("alu", 1, 1, (("wait", 0, 0, 0b1000),)))
    cal = C.load("h100")
    base = {k: v for k, v in cal.constants.items() if not k.startswith("lsu.local_")}

    def with_(**v):
        return dataclasses.replace(cal, constants={**base, **{k: {
            "value": x, "unit": "cycles", "kind": "measured", "source": "test"} for k, x in v.items()}})
    four = {"lsu.local_store_cycles.4B": 4.0, "lsu.local_store_cycles.16B": 16.0,
            "lsu.local_load_cycles.4B": 3.0, "lsu.local_load_cycles.16B": 7.0}
    assert replay.local_cycles(with_()) is None
    with pytest.raises(KeyError, match="all four"):
        replay.local_cycles(with_(**{k: x for k, x in four.items() if "store" in k}))
    local = replay.local_cycles(with_(**four))
    at = lambda op, w: replay.lsu_access_cycles(local, op, w, replay.LOCAL_WIDTHS)   # noqa: E731
    assert at("store", 8) == pytest.approx(8.0)     # between 4 and 16 B a lane
    assert at("load", 2) == 3.0 and at("load", 32) == 14.0

    r = replay.Replay.__new__(replay.Replay)
    r.used, r.slots, r.sm_of, r.lsu_free = defaultdict(dict), 1.0 * replay.BUCKET, {}, defaultdict(float)
    r.local, r.sb_lat, r.traffic = local, {"shfl": 30.0, "lds": 33.0, "ldg": 300.0, "shfl_sm": 2.0}, defaultdict(float)
    w = replay._Warp((0, 0), [])
    assert r._item(w, ("stl", 8)) and r.lsu_free[0] == pytest.approx(1 + 8.0)
    assert r._item(w, ("ldl", 4, 3))                    # waits for the path: the STL holds it until cycle 9
    assert w.t == pytest.approx(9.0) and r.lsu_free[0] == pytest.approx(9.0 + 3.0)
    assert any(s.cat == "local" for s in w.log) and w.sb[3] == pytest.approx(9.0 + 33.0)
    assert not r.traffic                                  # a spill moves no global bytes
    r2 = replay.Replay.__new__(replay.Replay)
    r2.used, r2.slots, r2.sm_of, r2.lsu_free = defaultdict(dict), 1.0 * replay.BUCKET, {}, defaultdict(float)
    r2.local, r2.sb_lat = None, None
    w2 = replay._Warp((0, 0), [])
    assert r2._item(w2, ("stl", 16)) and r2._item(w2, ("ldl", 16, 3)) and w2.t == pytest.approx(2.0)
    assert not r2.lsu_free


def test_the_spill_costs_come_from_the_lsu_probes_line_pattern():
    """pelib.predict.measured: the lsu probe's coalesced "line" costs at 4 and 16 B a lane become the four spill
    costs (the committed H200 calibration has them, transferred from the H100's lsu run)."""
    from pelib.paths import ROOT
    cal = C.load(ROOT / "results/2026-12-07-h200/predict-calibration-h200.json")
    for op in ("store", "load"):
        for w in (4, 16):
            e = cal.entry(f"lsu.local_{op}_cycles.{w}B")
            assert f"lsu.{op}.cycles_per_access.line_{w}B" in e["source"] and e["kind"] == "transferred"
            assert 1.0 < e["value"] < 100.0
