"""The go/no-go variant kernels of stage 09 (F22, F23, F24, F28; F25 = 09 with TIMING=1) and their host side (F21, F26)."""
import ctypes
import re
import struct

import numpy as np
import pytest

from pelib.layouts import banks, staging
from pelib import gonogo, stages
from pelib.measure import l2policy as L2, variants as V
from pelib.isa import sass, sass_account as SA
from pelib import build as B
from pelib.stage import Stage
from pelib.views import gonogo as G

CARDS = ("F22", "F23", "F24", "F28")
from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence
REG_LIMIT = {"F22": 255, "F23": 255, "F24": 255, "F25": 255, "F28": 240}   # F28: the card's fail-fast


def vbuild(card, **defines):
    v = V.VARIANTS[card]
    return B.build(v.file, arch="sm_100a", defines={**dict(v.defines), **defines})


def base():
    return B.build(V.BASE, arch="sm_100a")


def ops(b):
    return sass.opcode_histogram(b.sass, modifiers=True)


# ---- every variant: compiled facts ----------------------------------------------------------

@pytest.mark.parametrize("card", CARDS + ("F25",))
def test_variant_compiles_within_the_card_limits(card):
    b = vbuild(card)
    f = b.facts
    assert f.spill_stores == 0 and f.spill_loads == 0, f"{card}: spills"
    assert f.registers <= REG_LIMIT[card], f"{card}: {f.registers} registers"
    assert b.exports["smem_bytes"] <= SMEM_LIMIT
    assert ops(b).get("UTCQMMA.2CTA", 0) >= 4, "the 2-SM UMMA must survive"
    ev = V.card_evidence(card, with_diff=False)
    assert ev.status == V.COMPILED and {f.kind for f in ev.facts} <= {"compiled", "modelled"}
    facts = {x.metric: x.value for x in ev.facts}
    assert facts[f"{card.lower()}.registers"] == f.registers and facts[f"{card.lower()}.spills"] == 0


@pytest.mark.parametrize("card", CARDS)
def test_variant_timing_build_fits(card):
    t = vbuild(card, TIMING=1)
    assert t.facts.spills == 0 and t.facts.registers <= 255 and t.exports["timing_warps"] >= 6


@pytest.mark.parametrize("card", ("F23", "F24"))
def test_one_warp_per_lane_quarter_only(card):
    with pytest.raises(B.BuildError, match="NUM_EPI_WARPS == 4"):
        vbuild(card, NUM_EPI_WARPS=5)


# What each variant changes in its exports against stage 09 (anything else is drift: rebase the variant).
EXPORT_DELTA = {
    "F22": ({"epi_add_bf16x2"}, set(), set()),
    "F23": ({"epi_tmem_readers"}, set(), set()),
    "F24": ({"out_box_blocks", "out_box_cols", "out_box_rows", "out_swizzle", "staging_block_cols",
             "staging_swizzle", "staging_tma_store", "staging_fingerprint", "tmap_out_box_rows", "tmap_out_box_cols",
             "tmap_out_swizzle", "tmap_out_elem_bytes"}, {"phase2_unroll"}, {"smem_bytes", "staging_pitch", "staging_warp_bytes"}),
    "F28": ({"k_iters"}, set(), set()),
}


@pytest.mark.parametrize("card", CARDS)
def test_variant_is_stage_09_plus_its_change(card):
    e9, ev = base().exports, vbuild(card).exports
    added, removed, changed = EXPORT_DELTA[card]
    assert set(ev) - set(e9) == added and set(e9) - set(ev) == removed
    assert {k for k in set(ev) & set(e9) if ev[k] != e9[k]} == changed
    h = stages.read_header(V.VARIANTS[card].file)
    assert h.idea.startswith(f"go/no-go variant {card}") and h.parent == "fp8/09_persistent_megakernel"
    d = stages.diff(V.BASE, V.VARIANTS[card].path, skip_header=True)
    minus = [ln[1:] for ln in d.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:] for ln in d.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert any(card in ln for ln in plus), "the change names its card"
    if card == "F22":
        assert [m.strip() for m in minus] == ["fuse8(&acc[8 * v], c4, o);"]
    if card == "F23":
        assert len(minus) == 2 and all("drain" in m or "acc_empty" in m for m in minus)
    if card == "F28":       # only the MMA warp's K-loop goes
        src = V.VARIANTS["F28"].base_file.read_text()
        i = src.index("(&full[s], ring.phase")
        start = src.rindex("\n", 0, src.rindex("for (int kb", 0, i)) + 1
        loop = src[start:src.index("ring.advance();\n        }", i) + 30]
        assert minus and all(m in loop for m in minus), [m for m in minus if m not in loop]
    if card == "F24":       # only the staging constants and exports, drain() and the epilogue's calls go
        src = V.VARIANTS["F24"].base_file.read_text()
        allowed = "".join(_region(src, a, b) for a, b in (
            ("using StageBuf", "constexpr int PHASE2_UNROLL"), ("// The staging layout (pelib.layouts.staging)", "PELIB_EXPORT(phase2_unroll"),
            ("// One epilogue warp's share of a tile", "extern \"C\" __global__"),
            ("const u32 stage_buf = smem_u32", "\n"), ("u16* out_blk = out +", "\n"),
            ("if (NUM_EPI_WARPS == 4 || !epi_shares(warp))", "if (lane == 0) {")))
        assert minus and all(m in allowed for m in minus), [m for m in minus if m not in allowed]
    assert len(minus) <= 40


def _region(src, start, end):
    """The lines of src from the one holding `start` through the one holding `end` (after it)."""
    i = src.rindex("\n", 0, src.index(start)) + 1
    j = src.index(end, src.index(start) + len(start))
    return src[i:src.index("\n", j) + 1]


@pytest.mark.parametrize("card", ("F23", "F24", "F28"))
def test_emulated_tile_of_fp32_variants_matches_the_reference(card):
    r = V.emulate_check(card)
    assert r["report_ok"] and r["staged_ok"], r["issues"]
    assert r["within_1ulp"] and r["max_abs_err"] == 0.0, r


def test_emulated_f22_tile_is_the_bf16x2_path():
    r = V.emulate_check("F22")
    assert r["report_ok"] and r["staged_ok"] and r["equals_bf16x2_model"], r
    assert r["epilogue add"].startswith("BF16x2")
    assert 0 < r["max_abs_err"] < 16.0      # differs from the FP32 reference, far below the card's limit


@pytest.mark.parametrize("card", ("F24", "F28"))
def test_emulated_far_tile_in_the_second_accumulator(card):
    r = V.emulate_check(card, problem="medium", seed=5, tile=(37, 2), acc_buf=1)
    assert r["within_1ulp"] and r["report_ok"] and r["staged_ok"], r


# ---- F22 ---------------------------------------------------------------------------------------

def test_f22_replaces_fp32_adds_with_packed_bf16():
    b9, b22 = ops(base()), ops(vbuild("F22"))
    assert b9.get("FADD", 0) == 256 and b22.get("FADD", 0) == 0
    packed = b22.get("HADD2.BF16_V2", 0) + b22.get("HFMA2.BF16_V2", 0)
    assert packed == 128 == b9["F2FP.BF16.F32.PACK_AB"]      # one packed add per accumulator pair
    assert b22["F2FP.BF16.F32.PACK_AB"] == b9["F2FP.BF16.F32.PACK_AB"]
    assert "add.rn.bf16x2" in V.VARIANTS["F22"].file.read_text()


# ---- F23 ---------------------------------------------------------------------------------------

def test_f23_option_c_as_written_cannot_read_the_accumulator():
    from pelib import emulate as E

    # a warp reads only its own lane quarter: warp 2 cannot load lanes 0-31
    with pytest.raises(E.EmulationError, match="lanes 64..95 only"):
        E.tcgen05_ld_32x32b(E.Tmem(512), 2, 0 << 16 | 0, 32)
    # two epilogue warps (2 and 3) leave quarters 0 and 1 unread
    ex = base().exports
    p = E.TileParams.from_exports(ex, epi_warps=2)
    A = np.random.default_rng(0).integers(0, 0x38, (256, 128), dtype=np.uint8)
    Bm = np.random.default_rng(1).integers(0, 0x38, (256, 128), dtype=np.uint8)
    _, rep = E.emulate_tile(p, A, Bm, return_report=True)
    assert any("quarters [0, 1] unread" in i for i in rep.issues)


def test_f23_hands_tmem_over_on_named_barriers():
    h = ops(vbuild("F23"))
    assert h.get("BAR.ARV", 0) == 1 and sum(n for k, n in h.items() if k.startswith("BAR.SYNC")) == 1
    assert not any(k.startswith("BAR") for k in ops(base()))
    assert vbuild("F23").exports["num_threads"] == base().exports["num_threads"] == 192


# ---- F24 ---------------------------------------------------------------------------------------

def test_bank_model_rules():
    lanes = np.arange(32)
    assert banks.wavefronts(16 * lanes, 16) == 4                      # 512 contiguous bytes
    assert banks.wavefronts(np.zeros(32, int), 16) == 4                # one address: broadcast per phase
    assert banks.wavefronts(256 * lanes, 16) == 32                     # every lane in banks 0-3
    assert banks.wavefronts(4 * lanes, 4) == 1 and banks.wavefronts(128 * lanes, 4) == 32
    assert banks.wavefronts(8 * lanes, 8) == 2 and banks.wavefronts(256 * lanes, 8) == 32
    # quarter-warps are served apart: the same 8 rows in every quarter cost 8 per phase, 32 in all,
    # where a busiest-bank count over the whole warp (pelib.layouts.staging.wavefronts) sees 8
    rows = np.tile(256 * np.arange(8), 4)
    assert banks.wavefronts(rows, 16) == 32
    assert staging.wavefronts(rows[:, None] + np.arange(16)[None, :]) == 8
    assert banks.phase_wavefronts(16 * lanes, 16, active=lanes < 8) == [1, 0, 0, 0]
    with pytest.raises(banks.BankError, match="aligned"):
        banks.wavefronts(16 * lanes + 4, 16)
    with pytest.raises(banks.BankError, match="16 B"):
        banks.wavefronts(lanes, 12)


def test_f24_phase1_writes_are_as_conflict_free_as_the_padded_rows():
    e9, e24 = base().exports, vbuild("F24").exports
    rows = {a.label.split(":")[0]: a for a in banks.compare(e9, e24)}
    assert rows["09"].wavefronts == rows["F24"].wavefronts == rows["09"].ideal == 32 * 4
    assert rows["F24"].worst == 4 and rows["F24"].instructions == 32
    assert rows["unpadded rows (256 B), no swizzle"].worst == 32
    assert rows["256-B rows, 128B swizzle per 128-B segment"].worst == 8
    assert banks.conflict_ratio(e9, e24) == 1.0
    f = banks.f24_fact(e9, e24)
    assert f.kind == "modelled" and f.metric == "f24.phase1b_bank_conflict_ratio"
    # the card's fail-fast (> 1.0) would not fire; it accepts measured facts only, so it waits for a B200
    d = gonogo.evaluate(gonogo.card("F24"), [f])
    assert d.status == gonogo.PENDING and d.needs_b200
    assert banks.phase2_account(e24)["ld.shared.v4"] == 0 and banks.phase2_account(e9)["ld.shared.v4"] == 32


def test_f24_swizzle_matches_the_tma_swizzle_of_a_box():
    from pelib import emulate as E

    e24 = vbuild("F24").exports
    lay = banks.StagingAddresses.from_exports(e24)
    assert lay.kind == "swizzled" and lay.half_bytes == 8192 and e24["staging_warp_bytes"] == 16384
    # the TMA box (64, 32, 2) is dense, dimension 0 fastest, then swizzled by address
    for w in (2, 5):
        for h in (0, 1):
            col = np.arange(128)
            lane = np.arange(32)[:, None]
            logical = lay.buffer(w, h) + (col // 64) * 4096 + lane * 128 + 2 * (col % 64)
            assert (lay.element(w, h, lane, col) == E.swizzle_addr(logical, 128)).all()


def test_f24_kernel_address_function_matches_the_model():
    e24 = vbuild("F24").exports
    lay = banks.StagingAddresses.from_exports(e24)
    assert banks.fingerprint(lay) == e24["staging_fingerprint"]
    assert banks.fingerprint(lay, warp=5, half=1) == e24["staging_fingerprint"]     # same offsets in every half

    class NoSwizzle(banks.StagingAddresses):          # a model that forgot the XOR
        def element(self, warp, half, lane, col):
            lane, col = np.asarray(lane), np.asarray(col)
            return self.buffer(warp, half) + (col // 64) * 4096 + lane * 128 + 2 * (col % 64)
    assert banks.fingerprint(NoSwizzle(**lay.__dict__)) != e24["staging_fingerprint"]


def test_f24_staging_and_tma_stores_write_every_element_once():
    e24 = vbuild("F24").exports
    out, rep = banks.trace(e24)
    assert rep.ok and rep.written_once == 128 * 256, rep.issues
    wrong = dict(e24, out_swizzle=0)        # stores read the blocks unswizzled: elements land elsewhere
    _, bad = banks.run(wrong, np.arange(128 * 256, dtype=np.uint32).reshape(128, 256).astype(np.uint16))
    assert not bad.ok and bad.misplaced
    with pytest.raises(staging.StagingError):
        staging.StagingLayout.from_exports(e24)     # the padded-row model refuses F24's layout


def test_f24_uses_one_tma_store_per_half_and_saves_4_kb():
    b9, b24 = base(), vbuild("F24")
    h = ops(b24)
    assert h.get("UTMASTG.3D", 0) == 2 and h.get("UTMACMDFLUSH", 0) == 2
    assert sum(n for k, n in h.items() if k.startswith("STG")) == 0         # no manual copy-out left
    assert b9.exports["smem_bytes"] - b24.exports["smem_bytes"] == 4 * (17408 - 16384)
    spec = banks.f24_out_spec(928256, 768, b24.exports, address=0x10000)
    assert spec.rank == 3 and spec.dims == (64, 928256, 12) and spec.strides == (1536, 128)
    assert spec.box == (64, 32, 2) and spec.box_bytes == 8192 and spec.swizzle == 128
    with pytest.raises(banks.BankError, match="blocks"):
        banks.f24_out_spec(256, 96)


# ---- F25 ---------------------------------------------------------------------------------------

def test_f25_timing_build_records_every_epilogue_warp():
    t = vbuild("F25")
    ex = t.exports
    assert ex["timing_warps"] >= ex["epi_warp0"] + ex["epi_warps"]     # warps 2-5 have rows of their own
    assert ex["timing_phases"] > 6 and t.facts.registers <= 255 and t.facts.spills == 0
    n_clock = sum(1 for _, _, x in sass.instructions(t.sass) if "SR_CLOCKLO" in x)
    assert n_clock >= 8 and not any("SR_CLOCKLO" in x for _, _, x in sass.instructions(base().sass))
    ev = V.card_evidence("F25")
    assert ev.diff is None and "TIMING" in ev.facts[0].source


# ---- F28 ---------------------------------------------------------------------------------------

def test_f28_kloop_account_before_and_after():
    before, after = V.kloop_accounts()
    b, a = before.per_tile, after.per_tile
    assert b["UTCQMMA"] == a["UTCQMMA"] == 24
    assert b["SYNCS"] == a["SYNCS"] == 7 and b["UTCBAR"] == a["UTCBAR"] == 7
    assert a["total"] < b["total"] and a["other"] < b["other"]
    assert after.tile_loop is None            # no loop left inside the tile loop around the MMAs
    assert not SA.loops_containing(vbuild("F28").sass, "UTCQMMA")[0] == before.kloop
    rows = {r["class"]: r for r in G.kloop_table().rows}
    assert rows["total"]["change"] == a["total"] - b["total"]


def test_f28_register_rule_keeps_the_card_pending():
    ev = V.card_evidence("F28", with_diff=False)
    d = gonogo.evaluate(gonogo.card("F28"), list(ev.facts))
    assert d.status == gonogo.PENDING and d.needs_b200
    facts = {f.metric: f.value for f in ev.facts}
    assert facts["f28.registers"] <= 240 and facts["f28.kloop_instructions_delta"] < 0


def test_f28_full_barrier_waits_follow_the_ring_in_the_sass():
    b = vbuild("F28")
    ex = b.exports
    bar0 = ex["smem_bytes"] - 1024 - ex["barrier_bytes"]
    slots = []
    for _, op, text in sass.instructions(b.sass):
        m = re.search(r"TRYWAIT P\d, \[UR\d+\+0x([0-9a-f]+)\]", text)
        if m and bar0 <= int(m.group(1), 16) < bar0 + 8 * ex["pipeline_stages"]:
            s = (int(m.group(1), 16) - bar0) // 8
            if not slots or slots[-1] != s:      # a retry re-issues the same wait
                slots.append(s)
    runs = sorted([slots[:6], slots[6:]])
    assert len(slots) == 12 and runs == [[0, 1, 2, 3, 0, 1], [2, 3, 0, 1, 2, 3]], slots


def test_f28_slot_and_parity_formulas_follow_the_pipeline_state():
    ex = vbuild("F28").exports
    k, n = ex["k_iters"], ex["pipeline_stages"]
    idx, ph = 0, 0                              # PipelineState, advanced one k-block at a time
    ring_idx, ring_ph = 0, 0                    # the variant: per tile from its start slot
    for _ in range(25):
        s0 = ring_idx
        assert s0 in (0, k % n)
        for kb in range(k):
            assert ((s0 + kb) % n, ring_ph ^ (((s0 + kb) // n) & 1)) == (idx, ph)
            idx, ph = (idx + 1) % n, ph ^ (idx + 1 == n)
        ring_idx, ring_ph = (s0 + k) % n, ring_ph ^ (((s0 + k) // n) & 1)
        assert (ring_idx, ring_ph) == (idx, ph)


# ---- card evidence and the evaluator ---------------------------------------------------------

def test_cards_decisions_with_the_variant_evidence():
    ev = V.all_evidence(with_diff=False)
    facts = [f for e in ev.values() for f in e.facts]
    dec = {c.id: d for c, d in gonogo.dashboard(facts)}
    for c in ("F21", "F22", "F23", "F24", "F26", "F28"):
        assert dec[c].status == gonogo.PENDING and dec[c].needs_b200, dec[c]
    assert dec["F27"].status == gonogo.ABORT and dec["F27"].evidence == "recorded"
    assert dec["F25"].status == gonogo.GO and dec["F25"].evidence == "recorded"
    assert ev["F21"].status == ev["F26"].status == V.HOST_SIDE and "pelib.measure.l2policy" in ev["F26"].reason
    assert "F23" in V.VARIANTS and "lanes 32*(w%4)" in Stage(V.VARIANTS["F23"].file).header.what


# ---- F21 / F26: host side ---------------------------------------------------------------------

def test_f21_promotes_only_b():
    base_specs = Stage(L2.FINAL).tensor_map_specs("full")
    s = L2.f21_specs("siglip2")
    assert s["a"] == base_specs["a"] and s["a"].l2_promotion == 0
    assert s["b"].l2_promotion == 256 and s["b"].box == base_specs["b"].box and s["b"].dims == (768, 768)
    assert L2.f21_specs("siglip2", promotion=128)["b"].l2_promotion == 128
    with pytest.raises(L2.L2PolicyError, match="promotion"):
        L2.f21_specs("siglip2", promotion=512)
    from cuda.bindings import driver as drv
    from pelib import tma

    assert getattr(drv.CUtensorMapL2promotion, tma.L2_PROMOTIONS[s["b"].l2_promotion]).name.endswith("L2_256B")


def test_f26_window_structs_hold_the_fields():
    w = L2.b_window(problem="siglip2", base_ptr=0x7F0000001000)
    assert w.num_bytes == 768 * 768 == 589824 and w.hit_ratio == 1.0 and w.set_aside() == 589824
    d = w.driver()
    base_ptr, num_bytes, ratio, hit, miss = struct.unpack("<QQfii", ctypes.string_at(d.getPtr(), 28))
    assert (base_ptr, num_bytes, ratio, hit, miss) == (0x7F0000001000, 589824, 1.0, 2, 1)   # PERSISTING, STREAMING
    v = w.stream_attr()
    assert v.accessPolicyWindow.num_bytes == 589824 and int(v.accessPolicyWindow.hitProp) == 2
    assert struct.unpack("<QQfii", ctypes.string_at(v.getPtr(), 28)) == (0x7F0000001000, 589824, 1.0, 2, 1)
    r = w.runtime_attr()
    assert int(r.accessPolicyWindow.base_ptr) == 0x7F0000001000 and int(r.accessPolicyWindow.missProp) == 1
    assert L2.AccessPolicyWindow.from_driver(d) == w


def test_f26_window_rules():
    ok = L2.AccessPolicyWindow(0x1000, 1 << 20, 0.5)
    assert ok.set_aside() == 1 << 19
    for bad, msg in ((L2.AccessPolicyWindow(0, 1024, 1.5), "hitRatio"),
                     (L2.AccessPolicyWindow(0, 1024, miss_prop="persisting"), "missProp"),
                     (L2.AccessPolicyWindow(0, 0), "num_bytes")):
        with pytest.raises(L2.L2PolicyError, match=msg):
            bad.driver()
    assert any("max access-policy window" in p for p in ok.problems(max_window=1 << 19))
    assert any("evict each other" in p for p in L2.AccessPolicyWindow(0, 1 << 20).problems(set_aside=1 << 19))


@pytest.mark.gpu
def test_f26_window_on_a_stream():
    import torch

    b = torch.empty(768, 768, dtype=torch.uint8, device="cuda")
    w = L2.b_window(b)
    lim = L2.device_limits()
    if lim["max_persisting"] == 0:
        pytest.skip("this device has no persisting L2")
    s = torch.cuda.Stream()
    try:
        info = L2.apply(w, stream=s)
        assert info["set_aside"] > 0
        got = L2.read_back(stream=s)
        assert got.base_ptr == b.data_ptr() and got.num_bytes == w.num_bytes and got.hit_prop == "persisting"
    finally:
        L2.reset(stream=s)
    assert L2.read_back(stream=s).num_bytes == 0


# ---- the B200 path, checked without one ------------------------------------------------------

def test_every_card_launches_through_the_stage(fake_gpu, monkeypatch):
    """Each card's kernel up to the launch (a fake plan): its own stage file, stage 09's persistent grid,
    F21/F26's L2 promotion on B's map only, F26's window over B around the launches, F24's third map."""
    plans, _ = fake_gpu
    windows = []
    monkeypatch.setattr(L2, "apply", lambda w, stream=None, device_index=0: windows.append(w) or {})
    monkeypatch.setattr(L2, "reset", lambda stream=None, device_index=0: windows.append(None))
    for card in ("F21", "F22", "F23", "F24", "F26", "F28"):
        r = V.run(card, "medium", verify=False, time=False)
        p = plans[-1]
        maps = [a for a in p.args if isinstance(a, __import__("pelib").tma.TensorMap)]
        assert r["stage"] == V.stage_of(card).key and p.grid == (148, 1, 1) and p.block == (192, 1, 1)
        assert p.smem <= SMEM_LIMIT and p.runs == 0
        assert [m.spec.l2_promotion for m in maps[:2]] == [0, 256 if card in ("F21", "F26") else 0]
        assert len(maps) == (3 if card == "F24" else 2)
        if card == "F24":
            assert maps[2].spec.box_bytes == 8192
    assert len(windows) == 2 and windows[0].num_bytes == 768 * 768 and windows[1] is None   # F26 only, then reset
    from pelib.kinds.base import KindError
    with pytest.raises(KindError, match="unrolled for K = 768"):
        V.stage_of("F28").launch_config("small")


def _timing(phase_avgs: dict, warps=(1, 2, 3, 4, 5), ctas=2, tiles=4, per_warp=None):
    """A decoded Timing whose phases last the given cycles (per warp where per_warp says so)."""
    from pelib import timing

    lay = timing.Layout(ctas, 8, tiles, len(timing.phases()))
    start = np.zeros((ctas, 8, tiles, lay.phases), dtype=np.int64)
    end = np.zeros_like(start)
    for name, cycles in phase_avgs.items():
        p = timing.phase_id(name)
        for w in warps:
            c = (per_warp or {}).get((name, w), cycles)
            start[:, w, :, p] = 1000 + 10000 * np.arange(tiles)[None, :]
            end[:, w, :, p] = start[:, w, :, p] + c
    return timing.Timing(lay, start, end)


def test_measured_facts_decide_the_cards():
    b200 = "NVIDIA B200 (sm_100a)"
    base = {"ms": 0.543, "timing": _timing({"tma_wait": 856, "kloop": 4154, "epi_phase1": 4288, "epi_phase2": 900})}
    f22 = V.gate_facts("F22", base, {"ms": 0.535, "timing": _timing({"epi_phase1": 4000})}, b200)
    d = gonogo.evaluate(gonogo.card("F22"), f22)
    assert {f.metric: round(f.value, 2) for f in f22} == {"f22.wall_clock_improvement_pct": 1.47, "f22.phase1_delta_cycles": -288}
    assert d.status == gonogo.GO and d.evidence == "measured"
    slower = V.gate_facts("F22", base, {"ms": 0.55, "timing": _timing({"epi_phase1": 4300})}, b200)
    assert gonogo.evaluate(gonogo.card("F22"), slower).status == gonogo.ABORT
    # F21 measured elsewhere than on a B200 does not count for a B200 rule
    f21 = V.gate_facts("F21", base, {"timing": _timing({"tma_wait": 790})}, b200)
    assert f21[0].value == -66 and gonogo.evaluate(gonogo.card("F21"), f21).status == gonogo.GO
    h100 = V.gate_facts("F21", base, {"timing": _timing({"tma_wait": 790})}, "NVIDIA H100")
    assert gonogo.evaluate(gonogo.card("F21"), h100).status == gonogo.PENDING
    # F23: wave A reads [start, start + 4288), wave B starts where A ends: span = 2 x 4288, ratio 2.0 -> ABORT
    per = {("epi_phase1", 4): 4288, ("epi_phase1", 5): 4288}
    vt = _timing({"epi_phase1": 4288}, per_warp=per)
    vt.start[:, [4, 5]] += 4288
    vt.end[:, [4, 5]] += 4288
    f23 = V.gate_facts("F23", base, {"ms": 0.6, "timing": vt}, b200)
    ratio = {f.metric: f.value for f in f23}["f23.phase1_ratio_2w_over_4w"]
    assert ratio == pytest.approx(2.0) and gonogo.evaluate(gonogo.card("F23"), f23).status == gonogo.ABORT
    f24 = {f.metric: f.value for f in V.gate_facts("F24", base, {"timing": _timing(
        {"kloop": 3900, "epi_phase1": 4288, "epi_phase2": 100})}, b200)}
    assert f24["f24.kloop_improvement_pct"] == pytest.approx(100 * 254 / 4154) and f24["f24.epilogue_delta_cycles"] == -800
    f28 = V.gate_facts("F28", base, {"ms": 0.54, "timing": _timing({"kloop": 4000})}, b200)
    assert {f.metric for f in f28} == {"f28.wall_clock_improvement_pct", "f28.kloop_delta_cycles"}
    assert "not paired with F22" in f28[0].source


@pytest.mark.gpu
@pytest.mark.parametrize("card", ("F21", "F22", "F23", "F24", "F26", "F28"))
def test_card_kernel_verifies_on_a_b200(card):
    from pelib import device

    if not device.can_run("sm_100a"):
        pytest.skip("needs an sm_100 GPU (B200)")
    r = V.run(card, problem="medium", time=False)
    assert r["ok"], r.get("verify")
