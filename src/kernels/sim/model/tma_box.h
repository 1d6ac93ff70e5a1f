// One TMA box, the data path of cp.async.bulk.tensor .tile (no asynchrony: the engine queues the call
// and signals the mbarrier / bulk group itself).
//   tma_load_box   global -> shared: the box as cp.async.bulk.tensor.Nd.shared::cluster.global.tile writes
//                  it (swizzled by address, out-of-bounds elements zero); returns the complete_tx bytes.
//   tma_store_box  shared -> global: cp.async.bulk.tensor.Nd.global.shared::cta.tile; out-of-bounds
//                  elements are not written (clipped at the tensor bounds).
//   tma_box_geometry / tma_box_smem_span: bytes moved and the shared range a box occupies (for hazards).
//   swizzle_addr   the 32/64/128-B swizzle as a function of the shared address.
// Shared memory is one CTA's bytes `smem[0, smem_size)` that live at shared-window address
// `smem_base_addr` (the address a kernel's smem_u32() gives for smem[0]); `dst_addr`/`src_addr` are
// shared-window addresses like the instruction's [dstMem] operand.
// Reference: pelib.emulate.tma_load_2d / tma_store_2d / tma_box_addresses (proven byte for byte on an
// H100 for every swizzle, tests/test_gpu_emulate.py); tests/test_sim_models.py checks this file against it.
#pragma once
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>

#include "model/error.h"
#include "model/tensormap.h"

namespace pe_sim {

// Address-based swizzle (CUTLASS Swizzle<B,4,3>, include/cute/swizzle.hpp; PTX ISA "Tensor swizzling
// modes" of cp.async.bulk.tensor): 128B XORs address bits [4,7) with [7,10), 64B [4,6) with [7,9),
// 32B bit 4 with bit 7.
inline uint32_t swizzle_addr(uint32_t a, int swizzle) {
  uint32_t b = swizzle == 128 ? 3 : swizzle == 64 ? 2 : swizzle == 32 ? 1 : 0;
  return b ? a ^ (((a >> 7) & ((1u << b) - 1)) << 4) : a;
}

// Bytes after which a swizzle pattern repeats (PTX ISA, tensor swizzling modes): 1024, 512, 256; a
// swizzled box must start at this alignment so TMA and MMA see the same phase (pelib.emulate
// swizzle_repeat); 128 for an unswizzled box (PTX ISA cp.async.bulk.tensor: shared address 128-B aligned).
inline uint32_t tma_smem_alignment(int swizzle) {
  return swizzle == 128 ? 1024 : swizzle == 64 ? 512 : swizzle == 32 ? 256 : 128;
}

struct BoxGeometry {
  uint32_t n[5];        // elements moved per dimension: ceil(box / elementStride) (driver API)
  uint32_t pitch;       // bytes of one dim-0 row of the box
  uint32_t smem_pitch;  // bytes between rows in shared memory: a row narrower than the swizzle span
                        // takes the whole span (64-B rows under SWIZZLE_128B land 128 B apart; measured
                        // on an H100, 2026-11-23, pelib.emulate TensorMap2D.smem_pitch)
  uint32_t rows;        // product of n[1..rank)
  uint32_t bytes;       // bytes moved = the complete_tx count of one load (rows * pitch)
  uint32_t footprint;   // shared bytes spanned from the box start (rows * smem_pitch)
};

inline BoxGeometry tma_box_geometry(const PeSimTensorMap& m) {
  BoxGeometry g{};
  g.rows = 1;
  for (int i = 0; i < 5; ++i) g.n[i] = i < m.rank ? (m.box[i] + m.estrides[i] - 1) / m.estrides[i] : 1;
  for (int i = 1; i < m.rank; ++i) g.rows *= g.n[i];
  g.pitch = g.n[0] * m.elem_bytes;
  g.smem_pitch = m.swizzle && g.pitch < m.swizzle ? m.swizzle : g.pitch;
  g.bytes = g.rows * g.pitch;
  g.footprint = g.rows * g.smem_pitch;
  return g;
}

namespace detail {

inline void check_box_smem(const PeSimTensorMap& m, const BoxGeometry& g, uint32_t smem_size,
                           uint32_t smem_base_addr, uint32_t addr, const char* what) {
  uint32_t align = tma_smem_alignment(m.swizzle);
  if (addr % align)
    model_fail("TMA %s shared address 0x%x is not %u-byte aligned (%s): place the box at a multiple of %u",
               what, addr, align,
               m.swizzle ? "a swizzled box starts on its swizzle pattern boundary" : "cp.async.bulk.tensor", align);
  if (addr < smem_base_addr || uint64_t(addr - smem_base_addr) + g.footprint > smem_size)
    model_fail("TMA %s box [0x%x, 0x%llx) (%u B) lies outside this CTA's shared memory [0x%x, 0x%llx): "
               "enlarge the dynamic shared memory or move the box", what, addr,
               (unsigned long long)addr + g.footprint, g.footprint, smem_base_addr,
               (unsigned long long)smem_base_addr + smem_size);
}

inline void check_coords(const PeSimTensorMap& m, int ncoords, const char* what) {
  if (ncoords != m.rank)
    model_fail("TMA %s gives %d coordinates for a rank-%d tensor map: use the .%dd form", what, ncoords,
               int(m.rank), int(m.rank));
}

// Global element coordinates of row r of the box; false when any outer coordinate is out of bounds.
inline bool row_origin(const PeSimTensorMap& m, const BoxGeometry& g, const int32_t* c, uint32_t r,
                       int64_t* byte_off) {
  bool inside = true;
  int64_t off = 0;
  for (int i = 1; i < m.rank; ++i) {
    int64_t j = r % g.n[i];
    r /= g.n[i];
    int64_t gi = int64_t(c[i]) + j * m.estrides[i];
    if (gi < 0 || gi >= int64_t(m.dims[i])) inside = false;
    off += gi * int64_t(m.strides[i - 1]);
  }
  *byte_off = off;
  return inside;
}

// Copy `n` logical bytes at shared address `logical` (a row start) through the swizzle.
inline void row_to_smem(uint8_t* smem, uint32_t base, uint32_t logical, const uint8_t* src, uint32_t n,
                        int swizzle) {
  if (n % 16 == 0 && logical % 16 == 0) {
    for (uint32_t o = 0; o < n; o += 16) std::memcpy(smem + (swizzle_addr(logical + o, swizzle) - base), src + o, 16);
  } else {
    for (uint32_t o = 0; o < n; ++o) smem[swizzle_addr(logical + o, swizzle) - base] = src[o];
  }
}
inline void row_from_smem(const uint8_t* smem, uint32_t base, uint32_t logical, uint8_t* dst, uint32_t n,
                          int swizzle) {
  if (n % 16 == 0 && logical % 16 == 0) {
    for (uint32_t o = 0; o < n; o += 16) std::memcpy(dst + o, smem + (swizzle_addr(logical + o, swizzle) - base), 16);
  } else {
    for (uint32_t o = 0; o < n; ++o) dst[o] = smem[swizzle_addr(logical + o, swizzle) - base];
  }
}

}  // namespace detail

// Shared range [first, first + footprint) a box at `addr` occupies (the swizzle permutes bytes inside it).
inline uint32_t tma_box_smem_span(const PeSimTensorMap& m) { return tma_box_geometry(m).footprint; }

// PTX ISA 9.7.9.27 cp.async.bulk.tensor (.tile, global -> shared): box element (j0..j4) is global
// element (c_i + j_i * elementStride_i); rows (dim 0) packed at smem_pitch in dim-1-fastest order, then
// swizzled by address; elements outside [0, dims) read as zero (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE).
// Returns the bytes the load delivers (its complete_tx count, out-of-bounds bytes included).
inline uint32_t tma_load_box(const PeSimTensorMap& m, const int32_t* coords, int ncoords, uint8_t* smem,
                             uint32_t smem_size, uint32_t smem_base_addr, uint32_t dst_addr) {
  detail::check_coords(m, ncoords, "load");
  BoxGeometry g = tma_box_geometry(m);
  detail::check_box_smem(m, g, smem_size, smem_base_addr, dst_addr, "load destination");
  const uint8_t* gmem = reinterpret_cast<const uint8_t*>(uintptr_t(m.global_address));
  const uint32_t eb = m.elem_bytes, es0 = m.estrides[0];
  std::vector<uint8_t> row(g.pitch);
  for (uint32_t r = 0; r < g.rows; ++r) {
    int64_t off;
    bool inside = detail::row_origin(m, g, coords, r, &off);
    std::memset(row.data(), 0, g.pitch);
    if (inside) {
      for (uint32_t j0 = 0; j0 < g.n[0]; ++j0) {
        int64_t g0 = int64_t(coords[0]) + int64_t(j0) * es0;
        if (g0 < 0 || g0 >= int64_t(m.dims[0])) continue;
        std::memcpy(row.data() + j0 * eb, gmem + off + g0 * eb, eb);
      }
    }
    detail::row_to_smem(smem, smem_base_addr, dst_addr + r * g.smem_pitch, row.data(), g.pitch, m.swizzle);
  }
  return g.bytes;
}

// PTX ISA 9.7.9.27 cp.async.bulk.tensor (.tile, shared::cta -> global): the same box layout read
// from shared memory; elements outside the tensor are dropped. Returns the bytes read from shared memory.
inline uint32_t tma_store_box(const PeSimTensorMap& m, const int32_t* coords, int ncoords, const uint8_t* smem,
                              uint32_t smem_size, uint32_t smem_base_addr, uint32_t src_addr) {
  detail::check_coords(m, ncoords, "store");
  for (int i = 0; i < m.rank; ++i)
    if (m.estrides[i] != 1)
      model_fail("TMA stores with element strides != 1 are not modelled (element_strides[%d] = %d)", i,
                 int(m.estrides[i]));
  BoxGeometry g = tma_box_geometry(m);
  detail::check_box_smem(m, g, smem_size, smem_base_addr, src_addr, "store source");
  uint8_t* gmem = reinterpret_cast<uint8_t*>(uintptr_t(m.global_address));
  const uint32_t eb = m.elem_bytes;
  std::vector<uint8_t> row(g.pitch);
  for (uint32_t r = 0; r < g.rows; ++r) {
    int64_t off;
    if (!detail::row_origin(m, g, coords, r, &off)) continue;
    detail::row_from_smem(smem, smem_base_addr, src_addr + r * g.smem_pitch, row.data(), g.pitch, m.swizzle);
    int64_t lo = coords[0] < 0 ? -int64_t(coords[0]) : 0;
    int64_t hi = std::min<int64_t>(g.n[0], int64_t(m.dims[0]) - coords[0]);
    if (hi > lo) std::memcpy(gmem + off + (coords[0] + lo) * eb, row.data() + lo * eb, size_t(hi - lo) * eb);
  }
  return g.bytes;
}

}  // namespace pe_sim
