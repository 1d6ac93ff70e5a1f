"""pelib.isa.sass_account: loops, fast paths and the per-tile instruction account of the MMA warp."""
import pytest

from pelib import build as B
from pelib.views import fp8 as P
from pelib import records
from pelib.isa import sass_account as SA

# A hand-written disassembly in nvdisasm's format: a tile loop around a K-loop; the K-loop's wait
# has an inline retry loop (jumped over when the first try passes), the tile loop's wait an
# out-of-line one that returns with an unconditional backward branch (not a loop).
TOY = """
.text.k:
.L_x_0:
        /*0000*/                   MOV R1, R2 ;
.L_x_1:
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ+0x8], R3 ;
        /*0020*/              @!P0 BRA `(.L_x_9) ;
.L_x_2:
        /*0030*/                   IADD3 R4, PT, PT, R4, 0x1, RZ ;
        /*0040*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5+URZ], R6 ;
        /*0050*/               @P0 BRA `(.L_x_4) ;
.L_x_3:
        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5+URZ], R6 ;
        /*0070*/              @!P0 BRA `(.L_x_3) ;
.L_x_4:
        /*0080*/                   R2UR UR4, R7 ;
        /*0090*/                   UTCQMMA.2CTA gdesc[UR4], gdesc[UR6], tmem[UR9], tmem[UR22], idesc[UR23], UP0 ;
        /*00a0*/                   UTCQMMA.2CTA gdesc[UR4], gdesc[UR6], tmem[UR9], tmem[UR22], idesc[UR23], UPT ;
        /*00b0*/                   UTCBAR.2CTA.MULTICAST [UR8], URZ, UR9 ;
        /*00c0*/               @P1 BRA `(.L_x_2) ;
        /*00d0*/                   UTCBAR.2CTA.MULTICAST [UR4], URZ, UR5 ;
        /*00e0*/              @!P2 BRA `(.L_x_1) ;
        /*00f0*/                   EXIT ;
.L_x_9:
        /*0100*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ+0x8], R3 ;
        /*0110*/              @!P0 BRA `(.L_x_9) ;
        /*0120*/                   BRA `(.L_x_2) ;
"""


def test_parse_resolves_labels_and_targets():
    ins = SA.parse(TOY)
    assert [i.offset for i in ins][:3] == [0x0, 0x10, 0x20]
    br = {i.offset: i.target for i in ins if i.is_branch}
    assert br == {0x20: 0x100, 0x50: 0x80, 0x70: 0x60, 0xC0: 0x30, 0xE0: 0x10, 0x110: 0x100, 0x120: 0x30}
    assert ins[1].op == "SYNCS.PHASECHK.TRANS64.TRYWAIT" and ins[2].conditional and not ins[-1].conditional


def test_loops_ignore_unconditional_returns():
    loops = SA.loops(SA.parse(TOY))
    assert loops == [(0x60, 0x70), (0x100, 0x110), (0x30, 0xC0), (0x10, 0xE0)]   # innermost (smallest) first
    assert SA.loops_containing(TOY, "UTCQMMA") == [(0x30, 0xC0), (0x10, 0xE0)]


def test_toy_account():
    acc = SA.account(TOY, k_blocks=3)
    assert acc.kloop == (0x30, 0xC0) and acc.tile_loop == (0x10, 0xE0)
    assert [i.offset for i in acc.kloop_path] == [0x30, 0x40, 0x50, 0x80, 0x90, 0xA0, 0xB0, 0xC0]
    assert [i.offset for i in acc.tile_path] == [0x10, 0x20, 0xD0, 0xE0]
    kb, out, tile = acc.per_kblock, acc.per_tile_outside, acc.per_tile
    assert (kb["UTCQMMA"], kb["R2UR"], kb["SYNCS"], kb["UTCBAR"], kb["other"]) == (2, 1, 1, 1, 3)
    assert (out["SYNCS"], out["UTCBAR"], out["other"], out["total"]) == (1, 1, 2, 4)
    assert tile["total"] == 3 * 8 + 4 and tile["UTCQMMA"] == 6


def test_account_needs_an_mma_loop():
    with pytest.raises(SA.AccountError, match="UTCQMMA"):
        SA.account(TOY.replace("UTCQMMA.2CTA", "IMAD"), 6)


def test_classes():
    assert [SA.classify(o) for o in ("UTCQMMA.2CTA", "R2UR.BROADCAST", "SYNCS.ARRIVE.TRANS64", "UTCBAR.2CTA.MULTICAST",
                                     "ULOP3.LUT")] == ["UTCQMMA", "R2UR", "SYNCS/UTCBAR", "SYNCS/UTCBAR", "other"]


# ---- the real kernels -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def final():
    return P.build("09_persistent_megakernel")


def test_final_kernel_kloop(final):
    acc = SA.account(final.sass, 6)
    kb = acc.per_kblock
    assert kb["UTCQMMA"] == 4 and kb["SYNCS"] == 1 and kb["UTCBAR"] == 1, "one wait, 4 MMAs, one commit per k-block"
    assert acc.tile_loop is not None and acc.tile_loop[0] < acc.kloop[0] and acc.kloop[1] < acc.tile_loop[1]
    tile = acc.per_tile
    # the structure the lab's SourceCounters saw: 24 MMAs, 7 waits (1 accumulator + 6 stages), 7 commits
    assert (tile["UTCQMMA"], tile["SYNCS"], tile["UTCBAR"]) == (24, 7, 7)
    assert tile["total"] == 6 * kb["total"] + acc.per_tile_outside["total"]
    assert sum(tile[c] for c in SA.CLASSES) == tile["total"]
    path_ops = [i.op for i in acc.kloop_path]
    assert path_ops.index(next(o for o in path_ops if "TRYWAIT" in o)) < path_ops.index("UTCQMMA.2CTA")
    assert path_ops[-2].startswith("UTCBAR") and acc.kloop_path[-1].is_branch


def test_bounded_waits_cost_only_off_the_fast_path(final):
    bounded = SA.account(final.sass, 6)
    plain = SA.account(P.build("09_persistent_megakernel", {"PE_UNBOUNDED_WAIT": 1}).sass, 6)
    assert plain.per_tile["UTCQMMA"] == bounded.per_tile["UTCQMMA"] == 24
    assert plain.per_tile["total"] <= bounded.per_tile["total"]
    # the retry loop with its counter sits inside the bounded K-loop but is jumped over
    body = [i for i in SA.parse(final.sass) if bounded.kloop[0] <= i.offset <= bounded.kloop[1]]
    assert len(body) > bounded.per_kblock["total"]


def test_one_tile_stages_have_no_tile_loop():
    acc = SA.account(P.build("08_unroll").sass, 6)
    assert acc.tile_loop is None and acc.per_kblock["UTCQMMA"] == 4 and acc.per_tile["UTCQMMA"] == 24


def test_account_table_sits_beside_the_recorded_budget(final):
    acc = SA.account(final.sass, 6)
    rec = records.instruction_budgets()[0]
    t = SA.account_table(acc, rec)
    rows = {r["class"]: r for r in t.rows}
    assert rows["total"]["recorded per tile"] == 475 and rows["UTCQMMA"]["recorded per tile"] == 24
    assert rows["other"]["recorded per tile"] == 437
    assert "compiled" in t.caption and "recorded" in t.caption
    f28 = SA.account_table(acc, records.instruction_budgets()[1])
    assert {r["class"]: r for r in f28.rows}["other"]["recorded per tile"] == 373


def test_kloop_account_helper():
    acc, t = P.kloop_account()
    assert acc.k_blocks == 6 and t.rows[-1]["class"] == "total"


def test_listing_names_the_classes(final):
    text = SA.account(final.sass, 6).listing()
    assert "[UTCQMMA]" in text and "[SYNCS/UTCBAR]" in text and text.count("\n") >= 8


def test_gaps_between_tmem_loads():
    g = SA.gaps(P.build("09_persistent_megakernel").sass, "LDTM")
    assert len(g) == 7 and all(set(x) >= {"branches", "LDG", "instructions"} for x in g)


def test_a_kernel_without_tcgen05_has_no_account(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(int* p, int n) { for (int i = 0; i < n; ++i) p[i] += i; }\n')
    with pytest.raises(SA.AccountError):
        SA.account(B.build(src, "sm_100a", cache=False).sass, 6)


def test_account_by_wait_build():
    """The three wait builds of stage 09: the same MMA structure; the unbounded one (what a production
    kernel ships) has the shortest pass, the bounded ones keep a try counter live across the loop."""
    accs = {k: SA.account_build(B.build("fp8/09_persistent_megakernel.cu", "sm_100a", {"PE_WAIT_KIND": k}))
            for k in (0, 1, 2)}
    for k, a in accs.items():
        assert a.wait_kind == k and a.k_blocks == 6
        assert (a.per_tile["UTCQMMA"], a.per_tile["SYNCS"], a.per_tile["UTCBAR"]) == (4 * a.k_blocks, 7, 7)
        assert not any(i.op.startswith(SA.FENCES) for i in a.kloop_path + a.tile_path), "no L1 invalidate or GPU fence"
    assert accs[2].per_tile["total"] < accs[1].per_tile["total"] <= accs[0].per_tile["total"]
    assert "unbounded waits (wait_kind 2)" in SA.account_table(accs[2]).caption


def test_fences_and_steady_loops_on_the_toy():
    text = TOY.replace("        /*0030*/                   IADD3 R4, PT, PT, R4, 0x1, RZ ;",
                       "        /*0030*/                   CCTL.IVALL ;")
    loops = SA.steady_loops(text)
    assert loops["mma"] == [(0x30, 0xC0), (0x10, 0xE0)] and loops["epilogue"] == [] and loops["tma"] == []
    assert SA.fences(text, (0x30, 0xC0)) == {"CCTL.IVALL": 1, "MEMBAR.ALL.GPU": 0}
    assert SA.fences(TOY) == {"CCTL.IVALL": 0, "MEMBAR.ALL.GPU": 0}


def test_kloop_account_names_the_wait_build():
    """The account's caption names the build's wait_kind export: 0 by default, 2 for production."""
    _, default = P.kloop_account()
    _, production = P.kloop_account({"PE_WAIT_KIND": 2}, budget=1)
    assert "wait_kind 0" in default.caption and "wait_kind 2" in production.caption
    assert "F28" in production.caption or "411" in str(production.rows[-1])
