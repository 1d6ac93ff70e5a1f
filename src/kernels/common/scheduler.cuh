// Persistent static tile scheduling and the ring/buffer counters that go with it. Pure integer
// arithmetic: no tcgen05 or wgmma, so the sm_100a megakernel and the sm_90a twin can share it.
//
// A persistent kernel launches one CTA per SM (grid = CG * min(tiles, SMs / CG) CTAs, chosen by
// the host from the SM count at launch) and each cluster walks a fixed list of output tiles:
// cluster c of G takes tiles c, c + G, c + 2G, ... (the order of common/tile_map.cuh: N fastest,
// so the 3 N tiles of one 256-row block go to 3 neighbouring clusters at the same time and read
// the same A rows while they are in L2). On B200 with the SigLIP2 problem: 10,878 tiles over 74
// clusters, 146 or 147 tiles each (lab note fp8-megakernel-experiment-log.md: 148 SMs, 10,878 tiles).
// Every role of every CTA of a cluster runs the same schedule, so producer, MMA and epilogue agree
// on which tile is which without talking to each other.
//
// API:
//   PersistentTileScheduler<ACC_BUFS> s(first_cluster, num_clusters, total_tiles, n_tiles)
//     s.valid() / s.advance()      for (...; s.valid(); s.advance()) visits this cluster's tiles
//     s.tile                       the cluster-tile index; s.iter: how many tiles this cluster did before
//     s.coord(rank, BM, TN, CG)    this CTA's TileCoord (common/tile_map.cuh cta_tile)
//     s.acc_buf() / s.acc_phase()  accumulator buffer iter % ACC_BUFS, and the parity of its use
//                                  (iter / ACC_BUFS) & 1: the consumer waits for that parity on the
//                                  buffer's "full" barrier, the producer for its complement on "empty"
//     s.slot()                     iter, for per-tile records (timing)
//   PipelineState<STAGES>          index in a ring of STAGES slots and the parity of the current lap;
//     advance()                    next slot, flipping the parity after the last (CUTLASS PipelineState,
//                                  include/cutlass/pipeline/sm90_pipeline.hpp)
#pragma once
#include "common/types.cuh"
#include "common/tile_map.cuh"

template <int STAGES>
struct PipelineState {
  static_assert(STAGES >= 1, "PipelineState: a ring needs at least one slot");
  u32 index = 0;   // slot of the ring
  u32 phase = 0;   // parity of the lap: a waiter on "full" waits for phase, on "empty" for phase ^ 1
  PE_DEVICE void advance() {
    if (++index == STAGES) {
      index = 0;
      phase ^= 1;
    }
  }
};

template <int ACC_BUFS = 2>
struct PersistentTileScheduler {
  static_assert(ACC_BUFS == 1 || ACC_BUFS == 2 || ACC_BUFS == 4, "ACC_BUFS: 1, 2 or 4 accumulator buffers");
  int tile;      // current cluster-tile index
  int stride;    // clusters in the grid
  int total;     // cluster tiles of the problem
  int n_tiles;   // tiles along N
  int iter = 0;  // tiles this cluster has finished

  PE_DEVICE PersistentTileScheduler(int first, int num_clusters, int total_tiles, int n_tiles_)
      : tile(first), stride(num_clusters), total(total_tiles), n_tiles(n_tiles_) {}
  PE_DEVICE bool valid() const { return tile < total; }
  PE_DEVICE void advance() {
    tile += stride;
    ++iter;
  }
  PE_DEVICE TileCoord coord(int rank, int BM, int TN, int CG) const { return cta_tile(tile, rank, n_tiles, BM, TN, CG); }
  PE_DEVICE u32 acc_buf() const { return (u32)iter % ACC_BUFS; }
  PE_DEVICE u32 acc_phase() const { return ((u32)iter / ACC_BUFS) & 1; }
  PE_DEVICE u32 slot() const { return (u32)iter; }
};
