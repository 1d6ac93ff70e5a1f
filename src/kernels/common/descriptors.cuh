// UMMA (sm_100 tcgen05.mma) and GMMA (sm_90 wgmma) descriptors as constexpr encoders,
// usable in device code and in static_assert. pelib.isa.descriptors is the Python twin;
// tests/test_descriptors.py compiles static_asserts that the two agree.
//
// API (names are stable):
//   u32 umma_instr_desc(m, n, a_fmt, b_fmt, c_fmt, a_major=UMMA_MAJOR_K, b_major=UMMA_MAJOR_K,
//                       a_neg=0, b_neg=0, saturate=0, max_shift=0)
//       kind::f16 / kind::tf32 / kind::f8f6f4 / kind::i8 instruction descriptor (32-bit idesc operand)
//   u32 umma_instr_desc_block_scaled(m, n, a_fmt, b_fmt, scale_fmt, a_sf_id, b_sf_id,
//                       a_major=UMMA_MAJOR_K, b_major=UMMA_MAJOR_K, a_neg=0, b_neg=0, k_size=0,
//                       kind=UMMA_KIND_MXF4NVF4)
//       kind::mxf8f6f4 / kind::mxf4 / kind::mxf4nvf4 instruction descriptor; refuses what
//       pelib.isa.descriptors.umma_instr_desc_block_scaled refuses for the same kind
//   u32 umma_sf_id(tmem_addr)            bits [30,32) of a scale-factor TMEM address (-> a_sf_id/b_sf_id)
//   u64 umma_smem_desc(addr, lbo, sbo, swizzle_bytes, base_offset=0, lbo_mode=0)   sm_100, version bit 46 set
//   u64 gmma_smem_desc(addr, lbo, sbo, swizzle_bytes, base_offset=0)               sm_90 wgmma
//   u64 smem_desc_advance(desc, bytes)   K-advance: add bytes>>4 to the start-address field (low word)
// addr/lbo/sbo are byte values (addr: a shared-window address, e.g. from cvta.to.shared); the encoders
// drop the 4 LSBs. swizzle_bytes is 0 (none/interleave), 32, 64 or 128. A field out of range is a
// compile error in a constant expression (and a trap at run time).
// Sources: PTX ISA 9.7.16.4.1 "Shared Memory Descriptor", 9.7.16.4.2 "Instruction Descriptor",
// 9.7.15.5.1 "Matrix Descriptor" (wgmma); CUTLASS include/cute/arch/mma_sm100_desc.hpp
// (SmemDescriptor, InstrDescriptor, InstrDescriptorBlockScaled), include/cute/arch/mma_sm90_desc.hpp
// (GmmaDescriptor), include/cute/arch/mma_sm100_umma.hpp / mma_traits_sm100.hpp (DescriptorIterator).
#pragma once
#include "common/types.cuh"

#define PE_HD_CONSTEXPR __host__ __device__ constexpr inline

// Formats of InstrDescriptor a_format/b_format (mma_sm100_desc.hpp F16F32Format, MXF8F6F4Format, S8Format)
constexpr u32 UMMA_FMT_F16 = 0, UMMA_FMT_BF16 = 1, UMMA_FMT_TF32 = 2;            // kind::f16 / kind::tf32
constexpr u32 UMMA_FMT_E4M3 = 0, UMMA_FMT_E5M2 = 1, UMMA_FMT_E2M3 = 3,           // kind::f8f6f4
              UMMA_FMT_E3M2 = 4, UMMA_FMT_E2M1 = 5;
constexpr u32 UMMA_FMT_U8 = 0, UMMA_FMT_S8 = 1;                                    // kind::i8
constexpr u32 UMMA_FMT_MXF4_E2M1 = 1;   // packed E2M1 of kind::mxf4 / mxf4nvf4 (MXF4Format), NOT 5
// D format (CFormat) and scale-factor format (ScaleFormat)
constexpr u32 UMMA_C_F16 = 0, UMMA_C_F32 = 1, UMMA_C_S32 = 2;
constexpr u32 UMMA_SF_UE4M3 = 0, UMMA_SF_UE8M0 = 1;
constexpr u32 UMMA_MAJOR_K = 0, UMMA_MAJOR_MN = 1;
// Block-scaled MMA kinds, numbered as the stages' mma_kind export (pelib.emulate.MMA_KINDS).
constexpr u32 UMMA_KIND_MXF8F6F4 = 4, UMMA_KIND_MXF4 = 5, UMMA_KIND_MXF4NVF4 = 6;

// A violated range check: not constexpr, so a constant evaluation reaching it fails to compile.
__host__ __device__ __forceinline__ void pe_descriptor_field_out_of_range() {
#ifdef __CUDA_ARCH__
  asm volatile("trap;");
#endif
}
PE_HD_CONSTEXPR u32 pe_desc_check(bool ok, u32 v) {
  return ok ? v : (pe_descriptor_field_out_of_range(), v);
}

// Instruction descriptor, kind::tf32/f16/f8f6f4/i8 (PTX ISA Table 42; CUTLASS UMMA::InstrDescriptor):
// [0,2) sparse id2, [2] sparse, [3] saturate, [4,6) c_format, [7,10) a_format, [10,13) b_format,
// [13] a_negate, [14] b_negate, [15] a_major (transpose A), [16] b_major, [17,23) N>>3, [24,29) M>>4,
// [30,32) max_shift (.ws only).
PE_HD_CONSTEXPR u32 umma_instr_desc(u32 m, u32 n, u32 a_fmt, u32 b_fmt, u32 c_fmt,
                                    u32 a_major = UMMA_MAJOR_K, u32 b_major = UMMA_MAJOR_K,
                                    u32 a_neg = 0, u32 b_neg = 0, u32 saturate = 0, u32 max_shift = 0) {
  return pe_desc_check(m % 16 == 0 && m >= 16 && m <= 256, (m >> 4) << 24)
       | pe_desc_check(n % 8 == 0 && n >= 8 && n <= 256, (n >> 3) << 17)
       | pe_desc_check(a_fmt < 8, a_fmt << 7) | pe_desc_check(b_fmt < 8, b_fmt << 10)
       | pe_desc_check(c_fmt < 4, c_fmt << 4)
       | pe_desc_check(a_major < 2, a_major << 15) | pe_desc_check(b_major < 2, b_major << 16)
       | pe_desc_check(a_neg < 2, a_neg << 13) | pe_desc_check(b_neg < 2, b_neg << 14)
       | pe_desc_check(saturate < 2, saturate << 3) | pe_desc_check(max_shift < 4, max_shift << 30);
}

// Instruction descriptor, kind::mxf8f6f4/mxf4/mxf4nvf4 (PTX ISA Table 43; CUTLASS
// UMMA::InstrDescriptorBlockScaled): [0,2) sparse id2, [2] sparse, [4,6) b_sf_id, [7,10) a_format,
// [10,13) b_format, [13] a_negate, [14] b_negate, [15] a_major, [16] b_major, [17,23) N>>3,
// [23] scale_format (0 = UE4M3, 1 = UE8M0), [24,27) reserved, [27,29) M>>7, [29,31) a_sf_id, [31] k_size.
// What the kinds allow (PTX ISA, tcgen05.mma block scaling; pelib.isa.descriptors checks the same):
//   M 128 or 256 (M>>7 in two bits); N 8..256 in steps of 8;
//   formats: mxf8f6f4 E4M3 0, E5M2 1, E2M3 3, E3M2 4, E2M1 5; mxf4/mxf4nvf4 packed E2M1 1 only;
//   scales: UE8M0 for mxf8f6f4 and mxf4, UE4M3 or UE8M0 for mxf4nvf4;
//   mxf4/mxf4nvf4 take K-major A and B only; k_size (K96) exists for mxf4/mxf4nvf4 only;
//   scale-factor data IDs: 0..3 with scale_vec::1X (mxf8f6f4), 0 or 2 with block32 (2X: UE8M0 scales
//   of mxf4/mxf4nvf4), only 0 with block16 (4X: the UE4M3 scales of NVFP4).
PE_HD_CONSTEXPR bool umma_block_scaled_fmt_ok(u32 kind, u32 fmt) {
  return kind == UMMA_KIND_MXF8F6F4 ? (fmt <= UMMA_FMT_E2M1 && fmt != 2) : fmt == UMMA_FMT_MXF4_E2M1;
}
PE_HD_CONSTEXPR bool umma_block_scaled_sf_id_ok(u32 kind, u32 scale_fmt, u32 id) {
  return kind == UMMA_KIND_MXF8F6F4 ? id < 4 : scale_fmt == UMMA_SF_UE4M3 ? id == 0 : (id == 0 || id == 2);
}
PE_HD_CONSTEXPR u32 umma_instr_desc_block_scaled(u32 m, u32 n, u32 a_fmt, u32 b_fmt, u32 scale_fmt,
                                                 u32 a_sf_id, u32 b_sf_id,
                                                 u32 a_major = UMMA_MAJOR_K, u32 b_major = UMMA_MAJOR_K,
                                                 u32 a_neg = 0, u32 b_neg = 0, u32 k_size = 0,
                                                 u32 kind = UMMA_KIND_MXF4NVF4) {
  const bool mxf4 = kind == UMMA_KIND_MXF4 || kind == UMMA_KIND_MXF4NVF4;
  return pe_desc_check(mxf4 || kind == UMMA_KIND_MXF8F6F4, 0)
       | pe_desc_check(m == 128 || m == 256, (m >> 7) << 27)
       | pe_desc_check(n % 8 == 0 && n >= 8 && n <= 256, (n >> 3) << 17)
       | pe_desc_check(umma_block_scaled_fmt_ok(kind, a_fmt), a_fmt << 7)
       | pe_desc_check(umma_block_scaled_fmt_ok(kind, b_fmt), b_fmt << 10)
       | pe_desc_check(scale_fmt < 2 && (kind == UMMA_KIND_MXF4NVF4 || scale_fmt == UMMA_SF_UE8M0), scale_fmt << 23)
       | pe_desc_check(umma_block_scaled_sf_id_ok(kind, scale_fmt, a_sf_id), a_sf_id << 29)
       | pe_desc_check(umma_block_scaled_sf_id_ok(kind, scale_fmt, b_sf_id), b_sf_id << 4)
       | pe_desc_check(a_major < 2 && !(mxf4 && a_major), a_major << 15)
       | pe_desc_check(b_major < 2 && !(mxf4 && b_major), b_major << 16)
       | pe_desc_check(a_neg < 2, a_neg << 13) | pe_desc_check(b_neg < 2, b_neg << 14)
       | pe_desc_check(k_size < 2 && !(kind == UMMA_KIND_MXF8F6F4 && k_size), k_size << 31);
}

// Scale-factor ID = bits [30,32) of the TMEM address holding the scale factors
// (CUTLASS make_runtime_instr_desc_block_scaled: (tmem_sf_addr & 0xC0000000) >> 30).
PE_HD_CONSTEXPR u32 umma_sf_id(u32 tmem_addr) { return (tmem_addr & 0xC0000000u) >> 30; }

// matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (PTX ISA 9.7.16.4.1); we refuse what it would drop.
// Pass the masked shared address (smem_u32(p) & 0x3FFFF): in a cluster launch a CTA's shared::cta
// addresses carry its rank from bit 24 up (seen on an H100, 2026-11-23), and an unmasked one traps here.
PE_HD_CONSTEXPR u64 pe_desc_encode14(u32 bytes) {
  return pe_desc_check(bytes % 16 == 0 && bytes < (1u << 18), bytes >> 4);
}

// sm_100 layout_type [61,64) (CUTLASS UMMA::LayoutType): none 0, 128B_BASE32B 1, 128B 2, 64B 4, 32B 6.
PE_HD_CONSTEXPR u64 umma_layout_type(u32 swizzle_bytes) {
  return swizzle_bytes == 0 ? 0 : swizzle_bytes == 128 ? 2 : swizzle_bytes == 64 ? 4 : swizzle_bytes == 32 ? 6
       : pe_desc_check(false, 0);
}
// sm_90 layout_type [62,64) (CUTLASS GMMA::LayoutType): interleave 0, B128 1, B64 2, B32 3.
PE_HD_CONSTEXPR u64 gmma_layout_type(u32 swizzle_bytes) {
  return swizzle_bytes == 0 ? 0 : swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 3
       : pe_desc_check(false, 0);
}

// sm_100 shared-memory descriptor (PTX ISA 9.7.16.4.1 Table 40; CUTLASS UMMA::SmemDescriptor):
// [0,14) addr>>4, [16,30) LBO>>4, [32,46) SBO>>4, [46,48) version = 1 (bits 46-48 = 0b001),
// [49,52) base_offset, [52] lbo_mode (0 relative, 1 absolute), [61,64) layout type.
PE_HD_CONSTEXPR u64 umma_smem_desc(u32 addr, u32 lbo, u32 sbo, u32 swizzle_bytes,
                                   u32 base_offset = 0, u32 lbo_mode = 0) {
  return pe_desc_encode14(addr) | (pe_desc_encode14(lbo) << 16) | (pe_desc_encode14(sbo) << 32)
       | (1ull << 46) | ((u64)pe_desc_check(base_offset < 8, base_offset) << 49)
       | ((u64)pe_desc_check(lbo_mode < 2, lbo_mode) << 52) | (umma_layout_type(swizzle_bytes) << 61);
}

// sm_90 wgmma matrix descriptor (PTX ISA 9.7.15.5.1; CUTLASS GmmaDescriptor):
// [0,14) addr>>4, [16,30) LBO>>4, [32,46) SBO>>4, [49,52) base_offset, [62,64) layout type. No version bit.
PE_HD_CONSTEXPR u64 gmma_smem_desc(u32 addr, u32 lbo, u32 sbo, u32 swizzle_bytes, u32 base_offset = 0) {
  return pe_desc_encode14(addr) | (pe_desc_encode14(lbo) << 16) | (pe_desc_encode14(sbo) << 32)
       | ((u64)pe_desc_check(base_offset < 8, base_offset) << 49) | (gmma_layout_type(swizzle_bytes) << 62);
}

// K-advance inside a swizzle atom: CUTLASS DescriptorIterator adds an offset in 16-byte units to the
// descriptor (it lands in the start-address field of the low word). bytes must be a multiple of 16 and
// the new start address must stay inside the 14-bit field (no carry into LBO).
PE_HD_CONSTEXPR u64 smem_desc_advance(u64 desc, u32 bytes) {
  return desc + pe_desc_check(bytes % 16 == 0 && (desc & 0x3FFF) + (bytes >> 4) < (1u << 14), bytes >> 4);
}
// The same advance without the range check, for the MMA issue loop of a kernel whose descriptor start
// address is computed at run time (a check there is a compare and a trap branch per MMA on the issuing
// thread). The caller guarantees what the check tests: bytes a multiple of 16, and no carry out of the
// 14-bit start field, which holds whenever the advanced address stays inside the shared window below
// 256 KiB (a stage static_assert can say so: SMEM_BYTES <= PE_SMEM_LIMIT < 1 << 18).
PE_HD_CONSTEXPR u64 smem_desc_advance_unchecked(u64 desc, u32 bytes) { return desc + (bytes >> 4); }
