// Calibration probe: what one warp-wide global load or store costs an SM's load/store path, by the bytes
// each lane moves and how the lanes spread over rows. sm_90a. Not book content.
// 512 threads per CTA, one CTA per SM; warps 0 .. `warps` - 1 of CTAs below `active` run. Each issues
// `iters` warp-wide accesses back to back (`op` 0: st.global, 1: ld.global.nc, UNROLL of them in flight
// before their values are used) of `width` bytes a lane (4, 8 or 16), in one of two lane patterns over rows
// of `pitch` bytes:
//   pattern 0 "fragment": lane l at row l / 4, byte (l % 4) x width: four lanes a row, eight rows (the
//             wgmma accumulator fragment the register epilogues store, common/wgmma.cuh NOTES: at 4 B a
//             lane each 32-B sector is half written, at 16 B whole);
//   pattern 1 "line":     lane l at byte l x width of one row (fully coalesced);
//   pattern 2 "walk":     the fragment, but successive accesses walk along the eight rows (4 x width bytes a
//             row further each) until TILE_ROW_BYTES (a 256-column BF16 tile row) is covered, then the next
//             group: the order the register epilogues store a tile in (its column loop inside its row loop).
// Patterns 0 and 1 give each access a new 8-row group; all walk through `rows` rows (a power of two: the
// footprint, L2-resident after the host's warm-up launch). Unit = warp: its clock64 before the first access and after the last
// (a load's after its values are consumed), and the accesses it issued; the SM's cycles per access are its
// warps' span over their accesses. Method: the throughput microbenchmarks of Jia et al., "Dissecting the
// NVIDIA Volta GPU Architecture via Microbenchmarking" (arXiv 1804.06826), and Luo et al. (arXiv
// 2501.12084) on Hopper: many independent accesses in flight, cycles over their count.
#define PE_TIMING_WARPS 16
#include "probes/calib.cuh"
#include "common/memory.cuh"

constexpr int SMEM_BYTES = 120 * 1024;         // one CTA per SM
constexpr int MAX_WARPS = 16;
constexpr int UNROLL = 8;                      // loads in flight per warp before their first use
constexpr u32 TILE_ROW_BYTES = 512;            // pattern 2: one row of a 64 x 256 BF16 output tile

enum calib_lsu_field : u32 {
  CALIB_LSU_T0 = 0,          // clock64 before the warp's first access
  CALIB_LSU_T1 = 1,          // clock64 after its last (a load's values consumed)
  CALIB_LSU_ACCESSES = 2,    // warp-wide accesses issued (0: the warp did not run)
  CALIB_LSU_SINK = 3,        // xor of what the loads read (keeps them)
  CALIB_LSU_FIELDS = 4
};

PELIB_EXPORT(smem_bytes, SMEM_BYTES);
PELIB_EXPORT(num_threads, 512);
PELIB_EXPORT(units_per_cta, MAX_WARPS);
PELIB_EXPORT(unroll, UNROLL);
PELIB_EXPORT(fields, CALIB_LSU_FIELDS);

// Byte offset of lane `lane`'s access number `i` of warp `w` (among `nw` warps of the grid).
PE_DEVICE u64 lsu_offset(u32 i, u32 w, u32 nw, u32 lane, u32 width, u32 pattern, u32 pitch, u32 rows) {
  const u32 per = pattern == 2 ? TILE_ROW_BYTES / (4 * width) : 1;   // accesses per 8-row group
  const u32 group = ((i / per) * nw + w) * 8u;                       // 8 rows a group
  const u32 row = (pattern == 1 ? group : group + lane / 4) & (rows - 1);
  const u32 col = pattern == 1 ? lane * width : (i % per) * 4 * width + (lane % 4) * width;
  return (u64)row * pitch + col;
}

// One warp's accesses of W bytes a lane (a template, so the loop holds no branch on the width and the
// SM's issue slots stay far from the load/store path's rate: a few integer instructions an access).
template <int W>
PE_DEVICE u32 lsu_run(u8* buf, u32 op, u32 w, u32 nw, u32 lane, u32 pattern, u32 pitch, u32 rows, u32 iters) {
  u32 sink = 0;
  if (op == 0) {
#pragma unroll 4
    for (u32 i = 0; i < iters; ++i) {
      u8* p = buf + lsu_offset(i, w, nw, lane, W, pattern, pitch, rows);
      if constexpr (W == 16)
        st_global_v4(p, i, w, lane, 0x3F803F80u);
      else if constexpr (W == 8)
        st_global_v2(p, i, w);
      else
        st_global_b32(p, i ^ w);
    }
    return 0;
  }
  for (u32 i = 0; i < iters; i += UNROLL) {
    u32 v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const u8* p = buf + lsu_offset(i + u, w, nw, lane, W, pattern, pitch, rows);
      if constexpr (W == 16) {
        ld_global_nc_v4(p, v[u]);
      } else if constexpr (W == 8) {
        ld_global_nc_v2(p, v[u][0], v[u][1]);
        v[u][2] = v[u][3] = 0;
      } else {
        v[u][0] = ld_global_nc_b32(p);
        v[u][1] = v[u][2] = v[u][3] = 0;
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sink ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
  }
  return sink;
}

extern "C" __global__ void __launch_bounds__(512, 1)
calib_lsu(u8* buf, u64* out, u64* timing, u32 op, u32 width, u32 pattern, u32 pitch, u32 rows, u32 iters,
          u32 warps, u32 active) {
  PE_TIMING_CTA(timing);   // TIMING builds: each warp's clock64 and globaltimer at start and exit
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u64* rec = calib_rec(out, (u64)blockIdx.x * MAX_WARPS + warp, CALIB_LSU_FIELDS);
  __syncthreads();                               // the SM's warps start together
  if (warp >= warps || warp >= MAX_WARPS || blockIdx.x >= active) return;
  const u32 w = warp + warps * blockIdx.x, nw = warps * active;
  const u64 t0 = clock64_read();
  const u32 sink = width == 16 ? lsu_run<16>(buf, op, w, nw, lane, pattern, pitch, rows, iters)
                 : width == 8  ? lsu_run<8>(buf, op, w, nw, lane, pattern, pitch, rows, iters)
                               : lsu_run<4>(buf, op, w, nw, lane, pattern, pitch, rows, iters);
  const u64 t1 = clock64_read() + (sink == 0x9E3779B9u ? 1 : 0);   // t1 after the loads' values are used
  if (lane == 0) {
    rec[CALIB_LSU_T0] = t0;
    rec[CALIB_LSU_T1] = t1;
    rec[CALIB_LSU_ACCESSES] = op == 0 ? iters : (iters + UNROLL - 1) / UNROLL * UNROLL;
    rec[CALIB_LSU_SINK] = sink;
  }
}
