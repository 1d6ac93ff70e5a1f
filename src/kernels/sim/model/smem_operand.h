// Where an MMA operand's bytes live in shared memory, given the fields of its shared-memory
// descriptor; shared by gmma.h (sm_90 wgmma) and umma.h (sm_100 tcgen05.mma / tcgen05.cp).
// Canonical layouts (PTX ISA 9.7.16.3 "Strides and layouts" / 9.7.15.5.1 wgmma "Matrix descriptor";
// CUTLASS include/cute/arch/mma_sm100_desc.hpp make_umma_desc comments), in bytes, W = swizzle span,
// r = row (M or N index), c = byte along K:
//   K-major, swizzled:  start + (r/8)*SBO + (r%8)*W + c               (LBO unused; c < W)
//   K-major, none:      start + (r/8)*SBO + (r%8)*16 + (c/16)*LBO + c%16
//   MN-major, swizzled: start + (b/W)*LBO + b%W + (k%8)*W + (k/8)*SBO    (b = byte along M/N, k = K index)
//   MN-major, none:     start + (b/16)*SBO + b%16 + (k%8)*16 + (k/8)*LBO
// then the address-based swizzle (tma_box.h swizzle_addr), so TMA and MMA agree on every byte.
// Reference: pelib.emulate.operand_addresses (proven on an H100 for GMMA K-major reads with K advance).
#pragma once
#include <cmath>
#include <cstdint>

#include "model/error.h"
#include "model/tma_box.h"

namespace pe_sim {

// The fields both descriptor generations share, in bytes (start is an 18-bit shared address).
struct SmemDescFields {
  uint32_t start;
  uint32_t lbo;
  uint32_t sbo;
  int swizzle;           // 0, 32, 64, 128
  uint32_t base_offset;  // 0..7 (must be 0 here: not modelled)
};

// A swizzled operand's pattern must start on its repeat boundary (1024/512/256 B) when base_offset is 0:
// PTX ISA 9.7.16.4.1 "matrix base offset" is for starts off the boundary, which is not modelled. The
// start's bits inside one swizzle row (a K advance of 32/64/96 B under 128B) are allowed.
inline void check_pattern_start(const SmemDescFields& f, const char* what) {
  if (!f.swizzle) return;
  const uint32_t repeat = tma_smem_alignment(f.swizzle);
  if ((f.start & ~uint32_t(f.swizzle - 1)) % repeat)
    model_fail("%s descriptor: start 0x%x is not on a %u-B swizzle pattern boundary (plus an offset inside the "
               "first %d-B row) and base_offset is 0: place the tile at a multiple of %u B", what, f.start, repeat,
               f.swizzle, repeat);
}

// Shared address (18-bit window) of byte c along K of row r of a K-major operand.
inline uint32_t kmajor_addr(const SmemDescFields& f, uint32_t r, uint32_t c) {
  uint32_t logical = f.swizzle ? f.start + (r / 8) * f.sbo + (r % 8) * uint32_t(f.swizzle) + c
                               : f.start + (r / 8) * f.sbo + (r % 8) * 16 + (c / 16) * f.lbo + c % 16;
  return swizzle_addr(logical, f.swizzle);
}

// Shared address of byte b along M/N of K index k of an MN-major operand.
inline uint32_t mnmajor_addr(const SmemDescFields& f, uint32_t b, uint32_t k) {
  uint32_t W = uint32_t(f.swizzle);
  uint32_t logical = W ? f.start + (b / W) * f.lbo + b % W + (k % 8) * W + (k / 8) * f.sbo
                       : f.start + (b / 16) * f.sbo + b % 16 + (k % 8) * 16 + (k / 8) * f.lbo;
  return swizzle_addr(logical, f.swizzle);
}

// The bytes of a K-major operand: out[r * kbytes + c] for r < rows, c < kbytes, read from one CTA's
// shared memory smem[0, smem_size) whose first byte has shared address smem_base_addr (descriptor start
// addresses are the low 18 bits of shared addresses: PTX ISA matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4).
inline void read_kmajor(const SmemDescFields& f, uint32_t rows, uint32_t kbytes, const uint8_t* smem,
                        uint32_t smem_size, uint32_t smem_base_addr, uint8_t* out, const char* what) {
  if (f.base_offset)
    model_fail("%s descriptor: base_offset %u is not modelled: start swizzled tiles on their pattern boundary "
               "and leave base_offset 0", what, f.base_offset);
  check_pattern_start(f, what);
  if (f.swizzle && kbytes > uint32_t(f.swizzle))
    model_fail("%s: a K-major step reads %u B of K per row, more than the %dB swizzle span", what, kbytes,
               f.swizzle);
  const uint32_t base = smem_base_addr & 0x3FFFFu;
  for (uint32_t r = 0; r < rows; ++r) {
    if (f.swizzle && (kbytes % 16 == 0)) {
      for (uint32_t c = 0; c < kbytes; c += 16) {
        uint32_t a = kmajor_addr(f, r, c);
        if (a < base || a - base + 16 > smem_size)
          model_fail("%s: operand row %u reads shared address 0x%x, outside this CTA's shared memory "
                     "[0x%x, 0x%x): check the descriptor's start and SBO", what, r, a, base, base + smem_size);
        for (int i = 0; i < 16; ++i) out[r * kbytes + c + i] = smem[a - base + i];
      }
    } else {
      for (uint32_t c = 0; c < kbytes; ++c) {
        uint32_t a = kmajor_addr(f, r, c);
        if (a < base || a - base >= smem_size)
          model_fail("%s: operand row %u reads shared address 0x%x, outside this CTA's shared memory "
                     "[0x%x, 0x%x): check the descriptor's start, LBO and SBO", what, r, a, base, base + smem_size);
        out[r * kbytes + c] = smem[a - base];
      }
    }
  }
}

// The same for an MN-major operand of elem_bytes-byte elements: out[r * kbytes + c] (row r = M/N index,
// c = byte along K), so both majors hand the MMA the same (rows, K) byte matrix.
inline void read_mnmajor(const SmemDescFields& f, uint32_t rows, uint32_t kbytes, uint32_t elem_bytes,
                         const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint8_t* out,
                         const char* what) {
  if (f.base_offset)
    model_fail("%s descriptor: base_offset %u is not modelled", what, f.base_offset);
  check_pattern_start(f, what);
  const uint32_t base = smem_base_addr & 0x3FFFFu;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t k = 0; k < kbytes / elem_bytes; ++k)
      for (uint32_t e = 0; e < elem_bytes; ++e) {
        uint32_t a = mnmajor_addr(f, r * elem_bytes + e, k);
        if (a < base || a - base >= smem_size)
          model_fail("%s: MN-major operand reads shared address 0x%x, outside this CTA's shared memory", what, a);
        out[r * kbytes + k * elem_bytes + e] = smem[a - base];
      }
}

// ---- number formats (exact decode to float) --------------------------------------------------------
// E4M3 (FN: no infinity, S.1111.111 is NaN), E5M2, E2M1, UE4M3, UE8M0: OCP MX / PTX ISA "Alternate
// floating-point data formats"; the same tables as pelib.emulate decode_values.
inline float e4m3_to_float(uint8_t v) {
  int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  if (e == 15 && m == 7) return __builtin_nanf("");
  float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return s ? -mag : mag;
}
inline float e5m2_to_float(uint8_t v) {
  int s = v >> 7, e = (v >> 2) & 31, m = v & 3;
  float mag = e == 31 ? (m ? __builtin_nanf("") : __builtin_inff())
              : e == 0 ? std::ldexp(float(m), -16) : std::ldexp(float(4 + m), e - 17);
  return s ? -mag : mag;
}
inline float e2m1_to_float(uint8_t nibble) {
  static const float t[16] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  return t[nibble & 15];
}
// IEEE binary16 (kind::f16 format 0), exact.
inline float f16_to_float(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float mag = e == 31 ? (m ? __builtin_nanf("") : __builtin_inff())
              : e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(1024 + m), e - 25);
  return s ? -mag : mag;
}
inline float ue4m3_to_float(uint8_t v) { return v & 0x80 ? __builtin_nanf("") : e4m3_to_float(v); }
inline float ue8m0_to_float(uint8_t v) { return v == 255 ? __builtin_nanf("") : std::ldexp(1.0f, int(v) - 127); }

}  // namespace pe_sim
