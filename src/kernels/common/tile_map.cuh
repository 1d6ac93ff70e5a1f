// Which output tile a CTA computes. The C matrix [M, N] is cut into cluster tiles of
// (CG * BM) rows x TN columns; the CG CTAs of a cluster take consecutive BM-row halves of one.
//
// Order: N fastest. All N tiles of one row block run back to back, so the A rows they share are
// read from DRAM once and hit L2 afterwards (A is the big operand: M x K; B is 768 x 768 and stays
// in L2). gau-nernst learn-cuda 02e_matmul_sm100/matmul_v5.cu orders its tiles so the two CTAs of a
// cta_group::2 cluster get consecutive M blocks; we keep that and walk N inside one row block.
//
// API:
//   struct TileCoord { int m0, n0; }               first row / column of this CTA's BM x TN tile
//   TileCoord cta_tile(int tile, int rank, int n_tiles, int BM, int TN, int CG)
//       tile = cluster-tile index in [0, m_tiles * n_tiles), rank = CTA rank in the cluster
//   int num_cluster_tiles(int M, int N, int BM, int TN, int CG)
//   StaticTileScheduler: for persistent kernels (one cluster keeps taking tiles with a stride of
//       the number of clusters in the grid):  for (StaticTileScheduler s(...); s.valid(); s.advance())
#pragma once
#include "common/types.cuh"

struct TileCoord {
  int m0;  // first output row of this CTA's tile
  int n0;  // first output column
};

PE_DEVICE int num_cluster_tiles(int M, int N, int BM, int TN, int CG) {
  return (M / (CG * BM)) * (N / TN);
}

PE_DEVICE TileCoord cta_tile(int tile, int rank, int n_tiles, int BM, int TN, int CG) {
  const int m_blk = tile / n_tiles;  // cluster row block
  const int n_blk = tile % n_tiles;
  return TileCoord{(m_blk * CG + rank) * BM, n_blk * TN};
}

// Static persistent schedule: cluster c takes tiles c, c + G, c + 2G, ... (G = clusters in the grid).
// Every CTA of a cluster walks the same sequence, so the pair stays on one tile.
struct StaticTileScheduler {
  int tile, stride, total, n_tiles;
  PE_DEVICE StaticTileScheduler(int first, int num_clusters, int total_tiles, int n_tiles_)
      : tile(first), stride(num_clusters), total(total_tiles), n_tiles(n_tiles_) {}
  PE_DEVICE bool valid() const { return tile < total; }
  PE_DEVICE void advance() { tile += stride; }
  PE_DEVICE TileCoord coord(int rank, int BM, int TN, int CG) const {
    return cta_tile(tile, rank, n_tiles, BM, TN, CG);
  }
};
