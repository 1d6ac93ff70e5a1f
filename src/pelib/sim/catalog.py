"""Planted bugs: protocol and indexing mistakes a kernel author really makes, as data, each with the report
it must produce.

A mutation is a source patch applied at test time (never a committed variant): an exact `find` -> `replace`
on a stage file or on a common/ building block, where `find` must occur exactly once (so the catalog
cannot silently rot when a stage changes), plus a one-line description and the expected report:

    deadlock   the simulator's deadlock lists a blocked wait at one of `tags` (the stage's wait tags, the
               third argument of mbarrier_wait_parity); on a GPU the bounded wait traps, prints its tag
               (PE_WAIT_PRINTF) and pelib.launch raises KernelFault;
    hazard     a SimHazard whose kind or message names `site` (e.g. a shared-memory write while a TMA
               store still reads it);
    misuse     a SimMisuse whose kind or message names `site` (e.g. a TMEM read outside the warp's lane
               quarter, an mbarrier tx-count underflow);
    wrong      the kernel finishes and its output differs from the reference (on exact-arithmetic inputs:
               differs at all);
    clean      a benign edit: the kernel finishes with no deadlock, hazard or misuse and its output is the
               reference (the simulator must not cry wolf).

A race is a hazard on every seed, including the lazy and eager schedules (pelib.sim.engine.STANDARD_SEEDS): the
simulator orders accesses by happens-before, not by when its asynchronous operations happen to complete.

`gpu` says what an H100 shows for an sm90 mutation ("deadlock": a bounded wait traps; "wrong"; "illegal-address":
the launch faults with CUDA_ERROR_ILLEGAL_ADDRESS; "correct"), or None where the mistake is a race whose effect
on hardware is a matter of timing, or one no H100 run has shown yet (the simulator still reports it; the GPU
proof records what the H100 did, at the simulator's grid).

    with patched(Stage("sm90/01_warp_specialized"), mutation("sm90-empty-first-wait-parity0")) as s:
        s.build          # NVRTC, the patched source
        sim_host.run(s, "sim", inputs=s.inputs("sim", 0, "sim", exact=True))

Over 700 lines: the planted-bug catalog is data, one entry a mutation with the report it must produce; the code
is its first part.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import build as _build
from ..paths import KERNELS
from ..stage import Stage

KINDS = ("deadlock", "hazard", "misuse", "wrong", "clean")
GPU_SHOWS = ("deadlock", "wrong", "illegal-address", "correct")
# A hang of a mutated stage on a GPU traps in about a second and prints its wait tag (pelib.measure.sweep's
# debug build: the call-free waits of the sm90 stages become the printing ones).
GPU_DEFINES = {"PE_WAIT_PRINTF": 1, "PE_WAIT_LIMIT": 1 << 20}


class CatalogError(ValueError):
    """A mutation does not apply: its find text occurs zero or several times, or it names no file."""


@dataclass(frozen=True)
class Patch:
    """Replace the one occurrence of `find` in `file` (the stage file when None, else a path under
    src/kernels such as 'common/scheduler.cuh') by `replace`."""

    find: str
    replace: str
    file: str | None = None


@dataclass(frozen=True)
class Mutation:
    id: str
    stage: str                       # stage key, e.g. "sm90/01_warp_specialized"
    patches: tuple                   # Patch, ...
    description: str                 # one line: the mistake
    expect: str                      # one of KINDS
    tags: tuple = ()                 # deadlock: wait tags at which a blocked fiber must be reported
    site: str = ""                   # hazard / misuse: a word the report's kind or message contains
    gpu: str | None = None           # sm90: what an H100 shows (GPU_SHOWS); None: a race
    defines: dict = field(default_factory=dict)
    problem: str = "sim"
    why: str = ""                    # how the mistake becomes the expected report
    also: tuple = ()                 # other reports a schedule may give first, each as real (with `why`):
                                     # ("deadlock",) with `tags`, or another kind

    def __post_init__(self):
        if self.expect not in KINDS:
            raise CatalogError(f"{self.id}: expect={self.expect!r}, one of {KINDS}")
        if self.expect == "deadlock" and not self.tags:
            raise CatalogError(f"{self.id}: a deadlock names the wait tags where it shows")
        if self.expect in ("hazard", "misuse") and not self.site:
            raise CatalogError(f"{self.id}: a {self.expect} names the site (a word of the report)")
        if any(k not in KINDS for k in self.also):
            raise CatalogError(f"{self.id}: also={self.also!r}, each one of {KINDS}")
        if self.gpu is not None and self.gpu not in GPU_SHOWS:
            raise CatalogError(f"{self.id}: gpu={self.gpu!r}, one of {GPU_SHOWS} or None")

    @property
    def family(self) -> str:
        return self.stage.split("/")[0]

    def sources(self) -> dict[str, str]:
        """{file under src/kernels: patched text}, each find asserted to occur exactly once."""
        out: dict[str, str] = {}
        for p in self.patches:
            rel = p.file or f"{self.stage}.cu"
            text = out.get(rel)
            if text is None:
                path = KERNELS / rel
                if not path.is_file():
                    raise CatalogError(f"{self.id}: no file {rel} under src/kernels")
                text = path.read_text()
            n = text.count(p.find)
            if n != 1:
                raise CatalogError(f"{self.id}: the find text occurs {n} times in {rel} (must be once; the stage "
                                   f"changed? update the catalog): {p.find[:80]!r}")
            out[rel] = text.replace(p.find, p.replace)
        return out


def patch_hash(m: "Mutation") -> str:
    """sha256 over a mutation's patches and defines: what a recorded run of it must have used."""
    h = hashlib.sha256(repr((m.stage, [(p.file, p.find, p.replace) for p in m.patches],
                             sorted(m.defines.items()))).encode())
    return h.hexdigest()


def P(find: str, replace: str, file: str | None = None) -> Patch:
    return Patch(find, replace, file)


# ---------------------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------------------
CATALOG: tuple[Mutation, ...] = (
    # ---- sm90 (Hopper twin): what an H100 can show, and what only the model sees -------------------
    Mutation("sm90-00-full-count-2", "sm90/00_tma_wgmma",
             (P("mbarrier_init(&full_bar, 1);", "mbarrier_init(&full_bar, 2);"),),
             "the TMA barrier expects two arrivals, one thread arrives", "deadlock", tags=(1,), gpu="deadlock",
             why="full_bar's phase needs a second arrival nobody makes: every thread waits at tag 1"),
    Mutation("sm90-01-empty-first-wait-parity0", "sm90/01_warp_specialized",
             (P("mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);", "mbarrier_wait_parity_nocall(&empty[s], phase, 1);"),),
             "the producer's first wait on a fresh empty barrier uses parity 0", "deadlock", tags=(1,),
             gpu="deadlock",
             why="parity 0 of a fresh barrier completes only when the consumers release the slot, which needs "
                 "the load the producer never issues: producer at tag 1, consumers at tag 2"),
    Mutation("sm90-01-comb-row-off-by-one", "sm90/01_warp_specialized",
             (P("const u16* crow = comb + (size_t)comb_row(row) * N", "const u16* crow = comb + (size_t)comb_row(row + 1) * N"),),
             "the epilogue adds the next patch's comb row", "wrong", gpu="wrong"),
    Mutation("sm90-01-kstep-16B", "sm90/01_warp_specialized",
             (P("const u32 a_off = s * A_STAGE_BYTES + (wg * WG_M + mi) * 64 * BK + ks * 32;",
                "const u32 a_off = s * A_STAGE_BYTES + (wg * WG_M + mi) * 64 * BK + ks * 16;"),),
             "A's descriptor advances 16 B per k32 step instead of 32 B (K slices of A and B disagree)",
             "wrong", gpu="wrong"),
    Mutation("sm90-01a-ring-restarted-per-tile", "sm90/01a_persistent",
             (P("        for (int kb = 0; kb < num_kb; ++kb, ++it) {\n          const int s = it % NUM_STAGES;\n"
                "          const u32 phase = (it / NUM_STAGES) & 1;\n          const u64 tw = timing_now();\n"
                "          mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);",
                "        it = 0;  // planted: the producer's ring position is not carried across tiles\n"
                "        for (int kb = 0; kb < num_kb; ++kb, ++it) {\n          const int s = it % NUM_STAGES;\n"
                "          const u32 phase = (it / NUM_STAGES) & 1;\n          const u64 tw = timing_now();\n"
                "          mbarrier_wait_parity_nocall(&empty[s], phase ^ 1, 1);"),),
             "persistent producer restarts its ring position at every tile; the consumers carry theirs",
             "deadlock", tags=(1, 2), gpu="deadlock", defines={"NUM_STAGES": 2},
             why="2 slots, 3 K slices: the producer's second tile refills slot 0 once its second release "
                 "came, then waits for slot 1's second release, while the consumers wait for slot 1's second "
                 "load (with a deeper ring a restarted producer may pass a fresh barrier's parity-1 wait "
                 "first, a race)"),
    Mutation("sm90-02-tile-rank-offset-lost", "sm90/02_persistent_cluster",
             (P("return TileCoord{(m_blk * CG + rank) * BM, n_blk * TN};",
                "return TileCoord{(m_blk + rank) * BM, n_blk * TN};", "common/tile_map.cuh"),),
             "the cluster tile's row block is not scaled by the cluster size (common/tile_map.cuh cta_tile)",
             "wrong", gpu="wrong",
             why="clusters overlap by one CTA tile and the last rows are never written"),
    Mutation("sm90-02-last-release-leader-only", "sm90/02_persistent_cluster",
             (P("      if (tid < CLUSTER_M) mbarrier_arrive_remote_cta(&empty[(it - 1) % NUM_STAGES], tid);",
                "      if (tid < 1) mbarrier_arrive_remote_cta(&empty[(it - 1) % NUM_STAGES], tid);"),),
             "a tile's last slot is released in the leader CTA only, not in the peer the B multicast also fills",
             "deadlock", tags=(1, 3), gpu="deadlock",
             why="the peer's empty[s] misses two arrivals: its producer never gets the slot back (tag 1, or "
                 "tag 3 in its tail), and the leader then waits for the peer's half of B"),
    Mutation("sm90-03c-turn-parity-same", "sm90/03c_pingpong",
             (P("mbarrier_wait_parity_nocall(&turn[wg], wg == 0 ? ((n + 1) & 1) : (n & 1), 5);",
                "mbarrier_wait_parity_nocall(&turn[wg], n & 1, 5);"),),
             "ping-pong: both warpgroups wait for their turn with the same parity, so neither goes first",
             "deadlock", tags=(5,), gpu="deadlock"),
    Mutation("sm90-00a-ring-not-wrapped", "sm90/00a_smem_ring",
             (P("tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);",
                "tma_load_2d(smem + SMEM_A_OFF + kb * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);"),
              P("tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);",
                "tma_load_2d(smem + SMEM_B_OFF + kb * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);")),
             "the loads' shared-memory slot is the K slice index, not wrapped at the ring size",
             "misuse", site="outside", gpu="illegal-address", defines={"NUM_STAGES": 2},
             why="2 slots, 3 K slices: slice 2's B box runs over the barriers and past this CTA's shared memory"),
    Mutation("sm90-03-staging-reused-before-store-read", "sm90/03_staged_epilogue",
             (P("if (tid == 0) cp_async_bulk_wait_group_read<0>();  // the previous tile's stores have read stg",
                "// planted: no wait for the previous tile's TMA stores before stg is written again"),),
             "the staging buffer is rewritten before the previous tile's TMA stores have read it",
             "hazard", site="store",
             why="st.shared into a buffer an in-flight cp.async.bulk tensor store reads"),
    Mutation("sm90-04-b-expect-tx-one-slice-short", "sm90/04_pingpong_resident_b",
             (P("mbarrier_arrive_expect_tx(b_full, (u32)(num_kb * B_SLICE_BYTES));",
                "mbarrier_arrive_expect_tx(b_full, (u32)((num_kb - 1) * B_SLICE_BYTES));"),),
             "the resident-B barrier expects one K slice fewer than the loads deliver",
             "hazard", site="expect_tx", also=("misuse",),
             why="the phase completes without the last slice's bytes: the consumers' wait does not order the read "
                 "of that slice after its load (a hazard, whether the bytes come before or after); a tx-count "
                 "driven below zero is undefined (PTX ISA mbarrier: tx-count range); on an H100 one run deadlocked "
                 "at tags 1 and 4, the next finished correct (results/2026-11-24-h100/README.md)"),
    Mutation("sm90-05-no-producer-tail", "sm90/05_multicast_a",
             (P("        mbarrier_wait_parity_cluster_nocall(&empty[it % NUM_STAGES], ((it / NUM_STAGES) & 1) ^ 1, 3);",
                "        (void)0;  // planted: no producer tail"),),
             "a multicast producer exits without waiting for the peers' last releases",
             "misuse", site="exit",
             why="the CTA may exit while peer consumers still arrive on its empty barriers (CUTLASS load_tail)"),
    # ---- FP8 on sm_100a -------------------------------------------------------------------------
    Mutation("fp8-00-empty-first-wait-parity0", "fp8/00_ws_cta1",
             (P("mbarrier_wait_parity(&empty[s], phase ^ 1, 1);  // a fresh barrier passes parity 1 at once",
                "mbarrier_wait_parity(&empty[s], phase, 1);"),),
             "the producer's first wait on a fresh empty barrier uses parity 0", "deadlock", tags=(1,)),
    Mutation("fp8-01-expect-tx-one-cta-short", "fp8/01_cta2",
             (P("if (leader) mbarrier_arrive_expect_tx(&full[s], CG * STAGE_BYTES);",
                "if (leader) mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);"),),
             "cta_group::2: the leader's expect_tx counts its own stage, not the pair's", "hazard", site="expect_tx",
             also=("misuse",),
             why="both CTAs' TMA bytes complete on the leader's full[s]: its phase completes with half of them, and "
                 "the MMA's wait does not order the read of the other half (the tx-count may also go below zero)"),
    Mutation("fp8-01-commit-without-multicast", "fp8/01_cta2",
             (P("tcgen05_commit_multicast<CG>(smem_u32(&empty[s]), 0b11);  // slot s free, in both CTAs",
                "tcgen05_commit_multicast<CG>(smem_u32(&empty[s]), 0b01);"),),
             "cta_group::2: the slot release is committed to the leader's empty barrier only",
             "deadlock", tags=(1, 4),
             why="the peer's producer never gets a slot back: its tail (tag 4) or its next lap (tag 1) waits"),
    Mutation("fp8-01-acc-commit-wrong-barrier", "fp8/01_cta2",
             (P("tcgen05_commit_multicast<CG>(smem_u32(mma_done), 0b11);",
                "tcgen05_commit_multicast<CG>(smem_u32(&empty[0]), 0b11);"),),
             "the accumulator-complete commit goes to slot 0's empty barrier instead of mma_done",
             "deadlock", tags=(3,),
             why="mma_done never completes: every epilogue warp waits at tag 3"),
    Mutation("fp8-08a-acc-empty-one-warp-short", "fp8/08a_persistent_tiles",
             (P("mbarrier_init(&acc_empty[b], CG * NUM_EPI_WARPS);", "mbarrier_init(&acc_empty[b], CG * NUM_EPI_WARPS + 1);"),),
             "acc_empty expects one arrival more than the pair's epilogue warps make (their count one warp short)",
             "deadlock", tags=(5,),
             why="a buffer's first release never completes: the MMA warp's third tile waits at tag 5 (a count "
                 "one too low instead hands the buffer back early, a race)"),
    Mutation("fp8-08a-acc-phase-from-tile-parity", "fp8/08a_persistent_tiles",
             (P("mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase() ^ 1, 5);",
                "mbarrier_wait_parity(&acc_empty[buf], (sched.slot() & 1) ^ 1, 5);"),),
             "the MMA warp takes the accumulator phase from the tile count's parity, not its lap over the buffers",
             "deadlock", tags=(5,),
             why="tile 1 waits on buffer 1's fresh acc_empty with parity 0: a release of the tile it is about "
                 "to compute"),
    Mutation("fp8-08a-ring-restarted-per-tile", "fp8/08a_persistent_tiles",
             (P("      PipelineState<NUM_STAGES> ring;\n      for (PersistentTileScheduler<ACC_BUFS> sched(first, clusters, total_tiles, n_tiles); sched.valid(); sched.advance()) {\n        const TileCoord tile = sched.coord(rank, BM, TN, CG);",
                "      PipelineState<NUM_STAGES> ring;\n      for (PersistentTileScheduler<ACC_BUFS> sched(first, clusters, total_tiles, n_tiles); sched.valid(); sched.advance()) {\n        const TileCoord tile = sched.coord(rank, BM, TN, CG);\n        ring = PipelineState<NUM_STAGES>{};  // planted: the ring restarts at every tile"),),
             "persistent producer restarts its ring (slot and phase) at every tile; the MMA warp carries its",
             "deadlock", tags=(1, 2), defines={"NUM_STAGES": 2},
             why="2 slots, 3 K slices: on its second tile the producer waits for slot 1's second release while "
                 "the MMA waits for slot 1's second load"),
    Mutation("fp8-00-ring-not-wrapped", "fp8/00_ws_cta1",
             (P("tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, tile.m0);",
                "tma_load_2d(smem + SMEM_A_OFF + kb * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, tile.m0);"),
              P("tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, tile.n0);",
                "tma_load_2d(smem + SMEM_B_OFF + kb * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, tile.n0);")),
             "the producer's shared-memory slot is the K slice index, not wrapped at the ring size",
             "misuse", site="outside", defines={"NUM_STAGES": 2},
             why="2 slots, 3 K slices: slice 2's B box starts at the end of the B ring and runs past this CTA's "
                 "shared memory (its A box lands in the free B slot 0)"),
    Mutation("fp8-09-acc-released-before-wait-ld", "fp8/09_persistent_megakernel",
             (P("    tcgen05_ld_32x32b_x32(t_row + c, acc);\n    if (j >= CH)",
                "    tcgen05_ld_32x32b_x32(t_row + c, acc);\n"
                "    if (j == 2 * CH - 1) { tcgen05_fence_before_thread_sync(); __syncwarp(); "
                "if (lane == 0) mbarrier_arrive_remote_cta(acc_empty, 0); }  // planted: before wait::ld\n"
                "    if (j >= CH)"),
              P("  if (lane == 0) mbarrier_arrive_remote_cta(acc_empty, 0);\n  stage_copy_out",
                "  stage_copy_out")),
             "the epilogue releases the accumulator after its last tcgen05.ld but before tcgen05.wait::ld",
             "hazard", site="tmem",
             why="the MMA of a later tile may write the columns the unfinished tcgen05.ld still reads"),
    Mutation("fp8-01-no-cluster-sync-teardown", "fp8/01_cta2",
             (P("  tcgen05_fence_before_thread_sync();\n  cluster_sync();\n  if (warp == 1) {",
                "  tcgen05_fence_before_thread_sync();\n  __syncthreads();  // planted: no cluster_sync\n  if (warp == 1) {"),),
             "cta_group::2 teardown: the pair deallocates TMEM and exits without a cluster_sync",
             "misuse", site="exit",
             why="a CTA may exit (and free TMEM) while the leader's multicast commits still arrive on it"),
    Mutation("fp8-00-dealloc-before-last-read", "fp8/00_ws_cta1",
             (P("      PE_TIMING_END(timing, 0, PE_PHASE_KLOOP, t0);\n    }\n    __syncwarp();\n  } else {",
                "      PE_TIMING_END(timing, 0, PE_PHASE_KLOOP, t0);\n    }\n    __syncwarp();\n"
                "    tcgen05_dealloc<CG>(tmem_base, TMEM_COLS);  // planted: freed before anyone read it\n  } else {"),),
             "the MMA warp frees TMEM as soon as it has issued its last MMA and commit, before the epilogue reads",
             "misuse", site="tmem",
             why="the columns are freed while the MMAs still write them and before the epilogue's tcgen05.ld "
                 "(which waits for mma_done) reads them"),
    Mutation("fp8-05-wrong-lane-quarter", "fp8/05_epi_warps",
             (P("    const u32 t_row = tmem_base + ((u32)(sub * 32) << 16) + TMEM_ACC_COL;",
                "    const u32 t_row = tmem_base + ((u32)(((warp - 2) % 4) * 32) << 16) + TMEM_ACC_COL;"),),
             "epilogue warp w reads TMEM lanes 32*((w-2)%4), not its own quarter 32*(w%4)", "misuse",
             site="quarter",
             why="tcgen05.ld reaches only the lane quarter of warp w % 4 (PTX ISA tcgen05 data movement)"),
    Mutation("fp8-f24-staging-reused-before-store-read", "fp8/variants/09_f24_swizzled_staging",
             (P("  if (lane == 0) cp_async_bulk_wait_group_read<1>();\n  __syncwarp();\n#pragma unroll",
                "  __syncwarp();  // planted: no wait for the previous half-0 TMA store\n#pragma unroll"),),
             "F24: staging buffer 0 is rewritten before the previous tile's TMA store (Phase 2) has read it",
             "hazard", site="store"),
    # ---- NVFP4 ------------------------------------------------------------------------------------
    Mutation("nvfp4-01-refill-wait-parity-flipped", "nvfp4/01_pipelined",
             (P("mbarrier_wait_parity(&empty[s], phase, /*tag=*/2);", "mbarrier_wait_parity(&empty[s], phase ^ 1, /*tag=*/2);"),),
             "the refill waits on empty[s] with the wrong parity and passes before the MMAs read the slot",
             "hazard", site="read", also=("deadlock",), tags=(2,),
             why="TMA rewrites a slot that an in-flight MMA (or tcgen05.cp) still reads; when the MMAs' commit has "
                 "already landed (the eager schedule), the flipped parity waits for the next release instead, which "
                 "never comes: a deadlock at tag 2 (hardware shows either, by timing)"),
    Mutation("nvfp4-01-expect-tx-sf-short", "nvfp4/01_pipelined",
             (P("  mbarrier_arrive_expect_tx(bar, STAGE_TX_BYTES);", "  mbarrier_arrive_expect_tx(bar, STAGE_TX_BYTES - SFB_BYTES);"),),
             "expect_tx leaves out the SFB box", "hazard", site="expect_tx", also=("misuse",),
             why="the phase completes without the SFB bytes: the MMA thread's wait does not order its read of them; "
                 "when the SFB box lands before the others, the tx-count falls below zero first (a misuse)"),
    Mutation("nvfp4-03-sfb-box-per-n-tile", "nvfp4/03_narrow_n",
             (P("  const u32 sfb_blk = n_blk * TILE_N / SF_ROWS;             // the 128-row SF block holding this N tile",
                "  const u32 sfb_blk = n_blk;  // planted: one SF block per 64-wide tile"),),
             "B's scale factors are fetched as if each 64-wide N tile had a 128-row SF block of its own",
             "wrong",
             why="tile n reads block n, not n / 2: its TMA box lands on another tile's factors or past the "
                 "tensor's end, where TMA fills zeros, so the scaled products vanish"),
    Mutation("nvfp4-04-reduce-before-partials-arrive", "nvfp4/04_split_k_cluster",
             (P("  cluster_arrive();           // release: this CTA's pushes ...\n"
                "  cluster_wait();             // ... acquired by rank 0 before it reads them\n",
                ""),),
             "split-K: rank 0 reads the partial tiles before the cluster barrier orders the peers' DSMEM stores",
             "hazard", site="data race",
             why="the peers' st.shared::cluster and rank 0's loads of the same words are unordered: nothing "
                 "makes the stores happen before the reads (barrier.cluster.arrive.release / wait.acquire)"),
    Mutation("nvfp4-04-k-range-not-split", "nvfp4/04_split_k_cluster",
             (P("k_tiles = all_k_tiles / SPLIT_K, kt0 = rank * k_tiles;",
                "k_tiles = all_k_tiles / SPLIT_K, kt0 = 0;  // planted"),),
             "split-K: every rank walks the first K range, so the tile sums K range 0 twice and never the rest",
             "wrong"),
    Mutation("nvfp4-07-producer-waits-this-use", "nvfp4/07_split_k_roles",
             (P("mbarrier_wait_parity(&empty[s], ((kt / NUM_STAGES) - 1) & 1, /*tag=*/2);",
                "mbarrier_wait_parity(&empty[s], (kt / NUM_STAGES) & 1, /*tag=*/2);  // planted"),),
             "the producer thread waits on empty[s] with the parity of the use it is about to fill, not of the "
             "use before", "misuse", site="more arrivals|tma load", also=("hazard",), defines={"NUM_STAGES": 1},
             why="(a one-stage ring, so that the test size's two K tiles a CTA refill a stage) split from the MMA "
                 "issuer, the producer refills use u of a stage after the release of use u - 1 (parity "
                 "(u - 1) & 1); with u & 1 its first refill waits for parity 1, which a fresh barrier passes at "
                 "once: it arms full[s] again while the first load's phase is still open (more arrivals than the "
                 "count: a misuse), or, where that phase has completed (the eager schedule), its TMA rewrites the "
                 "stage an MMA or tcgen05.cp still reads (a hazard)"),
    Mutation("nvfp4-05-mma-skips-acc-empty-wait", "nvfp4/05_persistent_acc2",
             (P("        mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase() ^ 1, /*tag=*/5);   // the epilogue drained it",
                "        (void)0;  // planted: the MMA warp does not wait for the epilogue to drain buffer b"),),
             "the MMA warp accumulates into a TMEM buffer the epilogue may still be reading", "hazard", site="tmem",
             why="tile i + 2's first MMA (enable_input_d = 0) overwrites accumulator b while the epilogue's "
                 "tcgen05.ld of tile i may not have happened yet: nothing orders them"),
    Mutation("nvfp4-05-acc-empty-parity-not-flipped", "nvfp4/05_persistent_acc2",
             (P("mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase() ^ 1, /*tag=*/5);",
                "mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase(), /*tag=*/5);"),),
             "the MMA warp waits on acc_empty[b] with the consumer's parity, as if the buffer started full",
             "deadlock", tags=(3, 5),
             why="a fresh barrier is in phase 0: the wait for parity 0 needs a first drain that only follows a "
                 "first fill, which is what the MMA warp was about to do, so the MMA warp (tag 5) and the "
                 "epilogue (tag 3) wait for each other"),
    Mutation("nvfp4-02-exit-before-store-read", "nvfp4/02_tma_store_epilogue",
             (P("  cp_async_bulk_wait_group_read<0>();   // the staging tile has been read: the CTA may exit (SMEM freed)",
                "  // planted: the CTA exits without waiting for its TMA stores to read the staging tile"),),
             "the CTA exits while its TMA stores still read the staging tile", "misuse", site="exit"),
    # ---- races that only the order of observations shows (hazards on every seed, eager or lazy) ----
    Mutation("fp8-09-epilogue-skips-acc-full-wait", "fp8/09_persistent_megakernel",
             (P("      mbarrier_wait_parity(&acc_full[buf], sched.acc_phase(), 3);  // each epilogue warp polls on its own",
                "      (void)0;  // planted: the epilogue does not wait for the accumulator"),),
             "the epilogue reads TMEM without waiting on the accumulator-full barrier", "hazard", site="tmem",
             why="its tcgen05.ld is not ordered after the MMAs' commit: on hardware it reads a half-written "
                 "accumulator whenever the MMAs are slower than the epilogue (eager completion hides it)"),
    Mutation("fp8-09-mma-skips-acc-empty-wait", "fp8/09_persistent_megakernel",
             (P("        mbarrier_wait_parity(&acc_empty[buf], sched.acc_phase() ^ 1, 5);  // both CTAs drained it",
                "        (void)0;  // planted: the MMA warp does not wait for the epilogue to drain the buffer"),),
             "the MMA warp reuses an accumulator buffer without waiting for the epilogue to drain it", "hazard",
             site="tmem",
             why="its tcgen05.mma writes TMEM columns whose tcgen05.ld by the epilogue it does not know complete"),
    Mutation("sm90-01-wgmma-slot-freed-one-group-early", "sm90/01_warp_specialized",
             (P("      wgmma_wait_group<1>();  // the previous slice's wgmmas are done: free its stage",
                "      wgmma_wait_group<2>();  // planted: one group too few retired before the release"),),
             "the consumers free a ring slot one wgmma.wait_group too early", "hazard", site="reads",
             defines={"NUM_STAGES": 2},
             why="2 slots, 3 K slices: slot 0 is released while the wgmmas of slice 0 may still read it, and the "
                 "producer's TMA load refills it (the wait that would order them is wait_group 1)"),
    Mutation("sm90-03-no-proxy-fence-before-tma-store", "sm90/03_staged_epilogue",
             (P("      fence_proxy_async_shared_cta();  // our st.shared before the async proxy's reads",
                "      // planted: no fence.proxy.async before the TMA store"),),
             "the epilogue's plain stores to the staging tile reach the TMA store without fence.proxy.async",
             "hazard", site="fence.proxy.async",
             why="generic-proxy writes (here plain pointer stores) are not visible to the async proxy's reads "
                 "without it (PTX ISA 9.7.12.4)"),
    Mutation("nvfp4-01-sf-columns-shared", "nvfp4/01_pipelined",
             (P("mma_ktile(stage, tmem, s * TMEM_STAGE_COLS, kt == 0);", "mma_ktile(stage, tmem, 0, kt == 0);"),),
             "every ring stage copies its scale factors into the same TMEM columns", "hazard", site="pipelined",
             why="the next K tile's tcgen05.cp rewrites the columns an earlier tcgen05.mma may still read: "
                 "tcgen05.mma -> tcgen05.cp is not a pipelined pair (PTX ISA 9.7.16.6.2)"),
    # ---- accesses outside the memory the kernel owns --------------------------------------------------
    Mutation("sm90-00-row-guard-off-by-one", "sm90/00_tma_wgmma",
             (P("      if (row >= M) continue;", "      if (row > M) continue;"),),
             "the raw-pointer epilogue's row guard lets row M through", "misuse", site="out-of-bounds", gpu="wrong",
             why="the partial last row tile stores one row past the output tensor (on a GPU it silently writes "
                 "whatever lies after it)"),
    Mutation("sm90-03-staging-out-of-window", "sm90/03_staged_epilogue",
             (P("      u8* stg = smem + SMEM_C_OFF + wg * C_STAGE_BYTES;",
                "      u8* stg = smem + SMEM_C_OFF + (wg + 1) * C_STAGE_BYTES;"),),
             "each consumer warpgroup's staging tile is one tile too far", "misuse", site="outside",
             gpu="illegal-address",
             why="the second warpgroup's plain stores run past the CTA's dynamic shared memory"),
    # ---- benign edits: the simulator must stay quiet ----------------------------------------------------
    Mutation("sm90-01-loads-b-before-a", "sm90/01_warp_specialized",
             (P("        tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);\n"
                "        tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);",
                "        tma_load_2d(smem + SMEM_B_OFF + s * B_STAGE_BYTES, &tmap_b, &full[s], kb * BK, n0);\n"
                "        tma_load_2d(smem + SMEM_A_OFF + s * A_STAGE_BYTES, &tmap_a, &full[s], kb * BK, m0);"),),
             "the producer issues B's load before A's", "clean", gpu="correct"),
    Mutation("sm90-01-wait-group-0", "sm90/01_warp_specialized",
             (P("      wgmma_wait_group<1>();  // the previous slice's wgmmas are done: free its stage",
                "      wgmma_wait_group<0>();  // benign: every group retired before the release"),),
             "the consumers retire every wgmma group before releasing a slot (slower, still right)", "clean",
             gpu="correct"),
    Mutation("sm90-03-store-wait-full", "sm90/03_staged_epilogue",
             (P("      if (tid == 0) cp_async_bulk_wait_group_read<0>();  // the previous tile's stores have read stg",
                "      if (tid == 0) cp_async_bulk_wait_group<0>();  // benign: the stores finished, not just read"),),
             "the epilogue waits for the previous TMA stores to finish, not only to read the staging tile", "clean",
             gpu="correct"),
    Mutation("sm90-00-extra-syncthreads", "sm90/00_tma_wgmma",
             (P("        *reinterpret_cast<u32*>(orow + 8 * j) = f32x2_to_bf16x2(lo, hi);\n      }\n    }\n  }\n}",
                "        *reinterpret_cast<u32*>(orow + 8 * j) = f32x2_to_bf16x2(lo, hi);\n      }\n    }\n  }\n"
                "  __syncthreads();  // benign\n}"),),
             "a __syncthreads at the end of the kernel", "clean", gpu="correct"),
    Mutation("fp8-09-wait-acc-full-twice", "fp8/09_persistent_megakernel",
             (P("      mbarrier_wait_parity(&acc_full[buf], sched.acc_phase(), 3);  // each epilogue warp polls on its own",
                "      mbarrier_wait_parity(&acc_full[buf], sched.acc_phase(), 3);  // each epilogue warp polls on its own\n"
                "      mbarrier_wait_parity(&acc_full[buf], sched.acc_phase(), 3);  // benign: the same phase again"),),
             "the epilogue waits on the accumulator-full phase twice", "clean"),
    Mutation("fp8-09-extra-syncwarp-before-release", "fp8/09_persistent_megakernel",
             (P("  tcgen05_fence_before_thread_sync();\n  __syncwarp();  // every lane's loads done",
                "  __syncwarp();  // benign\n  tcgen05_fence_before_thread_sync();\n  __syncwarp();  // every lane's loads done"),),
             "an extra __syncwarp before the epilogue releases the accumulator", "clean"),
    Mutation("nvfp4-01-fence-twice", "nvfp4/01_pipelined",
             (P("      mbarrier_wait_parity(&full[s], phase, /*tag=*/1);        // consumer: acquire the stage\n"
                "      tcgen05_fence_after_thread_sync();",
                "      mbarrier_wait_parity(&full[s], phase, /*tag=*/1);        // consumer: acquire the stage\n"
                "      tcgen05_fence_after_thread_sync();\n      tcgen05_fence_after_thread_sync();  // benign"),),
             "the MMA thread issues tcgen05.fence::after_thread_sync twice", "clean"),
    Mutation("nvfp4-00-full-wait-parity-fixed", "nvfp4/00_single_stage",
             (P("mbarrier_wait_parity(full, kt & 1, /*tag=*/1);", "mbarrier_wait_parity(full, 0, /*tag=*/1);"),),
             "the single-stage loop waits for parity 0 on every K tile", "hazard", site="read", also=("deadlock",),
             tags=(1,),
             why="from the second K tile on the wait passes at once: the MMA reads a tile TMA is still writing; "
                 "when the loads land at once (the eager schedule) the barrier is two phases on and the parity-0 "
                 "wait waits for a phase that never comes: a deadlock at tag 1 (hardware shows either, by timing)"),
    # ---- fences as PTX defines them (PTX ISA 9.7.16.6.3 tcgen05.fence::*_thread_sync; 9.7.15.7.1 wgmma.fence) --
    Mutation("fp8-09-no-after-thread-sync-before-mma", "fp8/09_persistent_megakernel",
             (P("          tcgen05_fence_after_thread_sync();  // order the MMAs after the wait (PTX ISA 9.7.16, "
                "tcgen05 memory consistency; DeepGEMM ptx/tcgen05.cuh)\n",
                "          // planted: no tcgen05.fence::after_thread_sync between the full wait and the MMAs\n"),),
             "the MMA thread issues a stage's MMAs right after its full-barrier wait, without "
             "tcgen05.fence::after_thread_sync", "hazard", site="after_thread_sync",
             why="the wait orders the thread after the TMA bytes' landing, but its asynchronous tcgen05.mma is "
                 "ordered after that wait only through tcgen05.fence::after_thread_sync (PTX ISA 9.7.16.6.3): the "
                 "MMA may read the stage before its bytes land"),
    Mutation("fp8-09-after-thread-sync-before-each-mma", "fp8/09_persistent_megakernel",
             (P("          tcgen05_fence_after_thread_sync();  // order the MMAs after the wait (PTX ISA 9.7.16, "
                "tcgen05 memory consistency; DeepGEMM ptx/tcgen05.cuh)\n", ""),
              P("            tcgen05_mma_f8f6f4<CG>(d_tmem, smem_desc_advance(a_desc, k * UMMA_K),",
                "            tcgen05_fence_after_thread_sync();  // benign: moved to before each MMA\n"
                "            tcgen05_mma_f8f6f4<CG>(d_tmem, smem_desc_advance(a_desc, k * UMMA_K),")),
             "the MMA thread's tcgen05.fence::after_thread_sync moved from after the full wait to before each of "
             "the stage's MMAs (still between the wait and every MMA)", "clean"),
    Mutation("fp8-09-release-without-before-thread-sync", "fp8/09_persistent_megakernel",
             (P("  tcgen05_fence_before_thread_sync();\n  __syncwarp();  // every lane's loads done",
                "  __syncwarp();  // planted: no tcgen05.fence::before_thread_sync; every lane's loads done"),),
             "the persistent epilogue's early release of the accumulator (acc_empty) without "
             "tcgen05.fence::before_thread_sync after its tcgen05.wait::ld", "hazard", site="before_thread_sync",
             why="the warp knows its tcgen05.ld complete, but the arrive does not order them before the MMA of the "
                 "tile that reuses the accumulator: only tcgen05.fence::before_thread_sync between the wait and "
                 "the arrive does (PTX ISA 9.7.16.6.4.4); the MMA may overwrite columns still being read"),
    Mutation("fp8-09-before-thread-sync-in-releasing-lane", "fp8/09_persistent_megakernel",
             (P("  tcgen05_fence_before_thread_sync();\n  __syncwarp();  // every lane's loads done; also: buffer 1 "
                "complete, buffer 0 fully read\n  if (lane == 0) mbarrier_arrive_remote_cta(acc_empty, 0);",
                "  __syncwarp();  // every lane's loads done; also: buffer 1 complete, buffer 0 fully read\n"
                "  if (lane == 0) {\n    tcgen05_fence_before_thread_sync();  // benign: in the arriving lane\n"
                "    mbarrier_arrive_remote_cta(acc_empty, 0);\n  }"),),
             "the epilogue's tcgen05.fence::before_thread_sync moved into the lane that arrives, after the "
             "__syncwarp (still between its tcgen05.wait::ld and its arrive)", "clean"),
    Mutation("sm90-01-no-wgmma-fence", "sm90/01_warp_specialized",
             (P("      for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n      warpgroup_arrive();\n",
                "      for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n"
                "      if (kb > 0) warpgroup_arrive();  // planted: no wgmma.fence before the first slice's wgmmas\n"),),
             "the consumers issue their first K slice's wgmmas with no wgmma.fence before them", "hazard",
             site="wgmma.fence",
             why="PTX ISA 9.7.15.7.1: wgmma.fence must precede the warpgroup's first wgmma.mma_async (the zeroed "
                 "accumulator registers are written before it), otherwise the behavior is undefined"),
    Mutation("sm90-01-wgmma-fence-hoisted-out-of-kloop", "sm90/01_warp_specialized",
             (P("      for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n      warpgroup_arrive();\n",
                "      for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n"),
              P("    for (int kb = 0; kb < num_kb; ++kb) {\n      const int s = kb % NUM_STAGES;\n"
                "      const u32 phase = (kb / NUM_STAGES) & 1;\n      const u64 tw = timing_now();\n"
                "      mbarrier_wait_parity_nocall(&full[s], phase, 2);",
                "    warpgroup_arrive();  // benign: one wgmma.fence before the k-loop\n"
                "    for (int kb = 0; kb < num_kb; ++kb) {\n      const int s = kb % NUM_STAGES;\n"
                "      const u32 phase = (kb / NUM_STAGES) & 1;\n      const u64 tw = timing_now();\n"
                "      mbarrier_wait_parity_nocall(&full[s], phase, 2);")),
             "one wgmma.fence before the k-loop instead of one per K slice", "clean",
             why="between slices the accumulators are touched only by wgmma.mma_async of one shape, which are "
                 "ordered without a fence (PTX ISA 9.7.15.7.1); the registers are always in flight between slices"),
    # ---- loads nobody consumes: a refill past the last k-tile ----------------------------------------------
    Mutation("sm90-01-refill-past-last-ktile", "sm90/01_warp_specialized",
             (P("      for (int kb = 0; kb < num_kb; ++kb) {\n        const int s = kb % NUM_STAGES;",
                "      for (int kb = 0; kb <= num_kb; ++kb) {  // planted: one refill past the last k-tile\n"
                "        const int s = kb % NUM_STAGES;"),),
             "the producer loads one k-tile past the last into the ring; no consumer waits for it",
             "misuse", site="in flight",
             why="no thread of the CTA ever observes the phase the extra loads complete: the CTA may exit while "
                 "they still write its shared memory, on every schedule"),
    Mutation("sm90-01-refill-past-last-ktile-drained", "sm90/01_warp_specialized",
             (P("      for (int kb = 0; kb < num_kb; ++kb) {\n        const int s = kb % NUM_STAGES;",
                "      for (int kb = 0; kb <= num_kb; ++kb) {  // benign: one refill past the last k-tile ...\n"
                "        const int s = kb % NUM_STAGES;"),
              P("    wgmma_wait_group<0>();\n#pragma unroll\n    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n",
                "    wgmma_wait_group<0>();\n#pragma unroll\n    for (int mi = 0; mi < WG_M; ++mi) wgmma_fence_operand(d[mi]);\n"
                "    mbarrier_wait_parity_nocall(&full[num_kb % NUM_STAGES], (num_kb / NUM_STAGES) & 1, 2);  // ... drained\n")),
             "the producer loads one k-tile past the last, and every consumer waits for it (never reads it)",
             "clean",
             why="the loads complete before the CTA exits (its threads observed their phase): only waste, a "
                 "warning, not misuse"),
    Mutation("nvfp4-01-refill-past-last-ktile", "nvfp4/01_pipelined",
             (P("      if (kt + NUM_STAGES < k_tiles) {", "      if (kt + NUM_STAGES <= k_tiles) {  // planted: one past"),),
             "the MMA thread refills a ring slot with the k-tile past the last; nothing waits for it",
             "misuse", site="in flight",
             why="no thread observes the full barrier's phase of the extra k-tile: the CTA may exit while its four "
                 "TMA loads still write shared memory"),
    # ---- the register pool (PTX ISA setmaxnreg) ------------------------------------------------------------
    Mutation("sm90-03c-consumers-ask-256-registers", "sm90/03c_pingpong",
             (P("    setmaxnreg_inc<CONSUMER_REGS>();", "    setmaxnreg_inc<256>();  // planted: more than the pool has"),),
             "both consumer warpgroups ask for 256 registers a thread; the producer gave back enough for 232",
             "deadlock", tags=(1,),
             why="setmaxnreg.inc blocks until the CTA's pool has the registers (PTX ISA setmaxnreg): 8 consumer "
                 "warps want 8 x 32 x 88 registers, the producer's .dec gave 4 x 32 x 128; a warp of the second "
                 "consumer never gets them, its warpgroup never issues a wgmma, and the producer waits for a slot "
                 "(tag 1) that is never freed"),
    Mutation("sm90-03c-producer-gives-back-more", "sm90/03c_pingpong",
             (P("constexpr u32 PRODUCER_REGS = 40;", "constexpr u32 PRODUCER_REGS = 24;  // benign rebalancing"),),
             "the producer keeps 24 registers a thread instead of 40; the consumers take the difference (240)",
             "clean", why="24 + 2 x 240 = 504 = 3 x 168: the pool covers both consumers' .inc exactly"),
)

BY_ID = {m.id: m for m in CATALOG}
if len(BY_ID) != len(CATALOG):
    raise CatalogError("duplicate mutation ids in the catalog")


def mutation(mid: str) -> Mutation:
    if mid not in BY_ID:
        raise KeyError(f"no mutation {mid!r}; have {sorted(BY_ID)}")
    return BY_ID[mid]


def of_family(family: str) -> list[Mutation]:
    return [m for m in CATALOG if m.family == family]


# ---------------------------------------------------------------------------------------------------
# A stage on a patched file
# ---------------------------------------------------------------------------------------------------
class PatchedStage(Stage):
    """`base` built from a patched copy of its file in a temporary folder. The copy sits alone in that
    folder, which NVRTC searches first (pelib.build: the stage's folder, then src/kernels), so a patched
    building block (folder/common/<name>.cuh) shadows src/kernels/common/<name>.cuh and every other
    include resolves as for the original."""

    def __init__(self, base: Stage, path: Path, mutation: Mutation):
        super().__init__(base.path, base.defines)
        self.path = path
        self.base = base
        self.mutation = mutation

    def __repr__(self) -> str:
        return f"PatchedStage({self.key!r}, {self.mutation.id!r})"

    @property
    def label(self) -> str:
        return f"{super().label} [{self.mutation.id}]"

    def with_defines(self, **defines) -> "PatchedStage":
        return PatchedStage(self.base.with_defines(**defines), self.path, self.mutation)

    def without_defines(self, *names: str) -> "PatchedStage":
        if not any(n in self.defines for n in names):
            return self
        return PatchedStage(self.base.without_defines(*names), self.path, self.mutation)


MUTATIONS_DIR = Path(tempfile.gettempdir()) / "pelib-mutations"


def _write_if_changed(path: Path, text: str) -> None:
    """Write atomically (a temporary file renamed over `path`), only where the text differs."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def patched(stage: Stage | str, mut: Mutation | str):
    """A PatchedStage on a copy of `stage`'s file with `mut` applied. The copy lives in a folder named by
    the mutation and a hash of the patched text (under the system's temporary folder), so every use of one
    mutation builds the same path and the NVRTC and simulator caches find their builds again."""
    mut = mutation(mut) if isinstance(mut, str) else mut
    stage = Stage(stage, mut.defines) if isinstance(stage, str) else stage
    if stage.key != mut.stage:
        raise CatalogError(f"{mut.id} patches {mut.stage}, not {stage.key}")
    srcs = mut.sources()
    top_text = srcs.pop(f"{mut.stage}.cu", stage.path.read_text())
    for rel in srcs:
        if not rel.startswith("common/"):
            raise CatalogError(f"{mut.id}: a patched header must be a common/ building block, not {rel}")
    h = hashlib.sha256(repr((top_text, sorted(srcs.items()))).encode()).hexdigest()[:16]
    folder = MUTATIONS_DIR / f"{mut.id}-{h}"
    top = folder / stage.path.name
    _write_if_changed(top, top_text)
    for rel, text in srcs.items():
        _write_if_changed(folder / rel, text)
    yield PatchedStage(stage, top, mut)


def stage_of(mut: Mutation | str, **defines) -> Stage:
    mut = mutation(mut) if isinstance(mut, str) else mut
    return Stage(mut.stage, {**mut.defines, **defines})


def compile_check(mut: Mutation | str, **defines) -> _build.Build:
    """NVRTC-build the mutated stage for its arch (cached like every build); BuildError if it does not."""
    with patched(stage_of(mut, **defines), mut) as s:
        return s.build


# ---------------------------------------------------------------------------------------------------
# Outcomes: what a run showed, and whether it is what the catalog expects
# ---------------------------------------------------------------------------------------------------
_TAG_RE = re.compile(r"mbarrier wait timed out after \d+ tries: tag=(\d+)")
_SIM_TAG_RE = re.compile(r"\(tag (\d+)\)")


@dataclass
class Outcome:
    """What one run of a (mutated) stage showed: kind in deadlock | hazard | misuse | wrong | correct |
    fault (a GPU trap without a printed tag) | hang | error; the wait tags a deadlock blocked at; the
    report's text; the number of wrong elements and the output's sha256 where it finished."""

    kind: str
    tags: tuple = ()
    detail: str = ""
    n_bad: int | None = None
    sha256: str | None = None
    found: dict = field(default_factory=dict)   # simulator: {"deadlock"|"hazard"|"misuse": [report lines]}

    def as_dict(self) -> dict:
        d = {"kind": self.kind, "tags": list(self.tags), "detail": self.detail[:2000], "n_bad": self.n_bad,
             "sha256": self.sha256}
        if self.found:
            d["found"] = {k: v[:20] for k, v in self.found.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        return cls(d["kind"], tuple(d.get("tags") or ()), d.get("detail", ""), d.get("n_bad"), d.get("sha256"),
                   dict(d.get("found") or {}))


def gpu_tags(text: str) -> tuple[int, ...]:
    """The wait tags printed by bounded waits that timed out (common/mbarrier.cuh pe_wait_timeout)."""
    return tuple(sorted({int(t) for t in _TAG_RE.findall(text)}))


def sim_tags(lines) -> tuple[int, ...]:
    """The wait tags of a simulator deadlock's blocked threads ("mbarrier wait (tag N) on ...")."""
    return tuple(sorted({int(t) for x in lines for t in _SIM_TAG_RE.findall(str(x))}))


def matches(mut: Mutation, out: Outcome) -> tuple[bool, str]:
    """Whether a simulator outcome is the report the catalog expects: the earliest problem is of the expected
    kind AND names the site (a blocked wait at one of the tags; a hazard or misuse line containing the site
    word, alternatives separated by '|'), and why not."""
    kinds = {"correct" if k == "clean" else k for k in (mut.expect, *mut.also)}
    if out.kind not in kinds:
        return False, f"expected {' or '.join(sorted(kinds))}, got {out.kind}: {out.detail[:400]}"
    if out.kind == "deadlock":
        if not set(out.tags) & set(mut.tags):
            return False, f"deadlock at tags {sorted(out.tags)}, expected one of {list(mut.tags)}"
    elif out.kind in ("hazard", "misuse"):
        lines = out.found.get(mut.expect) or [out.detail]
        words = [w.lower() for w in mut.site.split("|")]
        if not any(w in x.lower() for x in lines for w in words):
            return False, f"no {out.kind} line names {mut.site!r}: {out.detail[:400]}"
    return True, ""


def agrees(sim: Outcome, gpu: Outcome) -> tuple[bool, str]:
    """Whether the simulator and the GPU tell the same story about one mutation: both deadlock and every
    tag the GPU printed is a wait the simulator found blocked; or both finish with wrong outputs and the
    same bytes (exact inputs: a deterministic mistake gives one output); or both correct."""
    if gpu.kind in ("fault", "hang", "deadlock") and sim.kind == "deadlock":
        if gpu.tags and not set(gpu.tags) <= set(sim.tags):
            return False, f"GPU trapped at tags {list(gpu.tags)}, the simulator blocked at {list(sim.tags)}"
        return True, "both deadlock" + (f" (GPU tags {list(gpu.tags)} among the simulator's {list(sim.tags)})"
                                        if gpu.tags else " (GPU printed no tag)")
    if gpu.kind == sim.kind == "wrong":
        if gpu.sha256 and sim.sha256 and gpu.sha256 != sim.sha256:
            return False, "both wrong, but the wrong outputs differ"
        return True, f"both wrong, same output bytes ({gpu.n_bad} wrong elements)"
    if gpu.kind == sim.kind == "correct":
        return True, "both correct"
    if gpu.kind == "fault" and "ILLEGAL_ADDRESS" in gpu.detail and sim.kind == "misuse" and "outside" in sim.detail:
        return True, "both stop at an access outside the CTA's shared memory (GPU: CUDA_ERROR_ILLEGAL_ADDRESS)"
    if gpu.kind == "wrong" and sim.kind == "misuse" and "out-of-bounds global" in sim.detail:
        # a store past a tensor is not stopped by a GPU: it lands in whatever memory follows (another tensor)
        return True, (f"the simulator stops at the out-of-bounds global store; the GPU wrote past the tensor "
                      f"and the run came out wrong ({gpu.n_bad} elements)")
    return False, f"simulator: {sim.kind}, GPU: {gpu.kind}"


def gpu_expected(mut: Mutation, gpu: Outcome) -> bool:
    """The GPU showed what the catalog says an H100 shows (a KernelFault from a trapped wait is a deadlock)."""
    if mut.gpu == "deadlock":
        return gpu.kind in ("fault", "deadlock") and "ILLEGAL_ADDRESS" not in gpu.detail
    if mut.gpu == "illegal-address":
        return gpu.kind == "fault" and "ILLEGAL_ADDRESS" in gpu.detail
    return mut.gpu is not None and gpu.kind == mut.gpu
