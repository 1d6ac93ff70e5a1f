// sm_100 tcgen05 data path (no asynchrony: the engine runs these when the queued operation completes).
//   decode_umma_smem_desc     sm_100 shared-memory descriptor -> fields (version bit, reserved bits checked)
//   decode_umma_idesc         instruction descriptor of kind::f16 / kind::f8f6f4 / kind::mxf4nvf4
//   umma_mma                  one tcgen05.mma (cta_group::1 M=128, cta_group::2 M=256), enable-input-d,
//                             .block_scale.block16 scale factors read from TMEM
//   tmem_ld_32x32b            tcgen05.ld.sync.aligned.32x32b.xN: (warp, thread, register) -> (lane, column)
//   tmem_cp_32x128b_warpx4    tcgen05.cp.cta_group::1.32x128b.warpx4: smem descriptor -> TMEM, 4 lane groups
// TMEM of one CTA: uint32_t[128 lanes][512 columns], word (lane, col) at tmem[lane * 512 + col]; FP32
// accumulators are stored as their bits. TMEM address = lane << 16 | column (PTX ISA 9.7.16.1); for a
// scale-factor address bits 30-31 are the scale-factor ID (CUTLASS make_runtime_instr_desc_block_scaled).
// Reference: pelib.emulate (operand_addresses, tmem_accumulator_map, cta_pair_split, tmem_ld_map,
// tcgen05_cp_32x128b_warpx4, _mma_scale_bytes) and pelib.isa.descriptors (decoders); tests/test_sim_models.py.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/blockfma.h"
#include "model/error.h"
#include "model/smem_operand.h"

namespace pe_sim {

constexpr uint32_t TMEM_LANES = 128, TMEM_COLS = 512;

// MMA kind codes (pelib.emulate.MMA_KINDS; the stages' PELIB_EXPORT(mma_kind, ...)).
enum UmmaKind : int { UMMA_KIND_F16 = 0, UMMA_KIND_TF32 = 1, UMMA_KIND_F8F6F4 = 2, UMMA_KIND_I8 = 3,
                      UMMA_KIND_MXF8F6F4 = 4, UMMA_KIND_MXF4 = 5, UMMA_KIND_MXF4NVF4 = 6 };

// One CTA as the tensor core sees it: its shared memory (smem[0, smem_size) at shared address
// smem_base_addr) and its TMEM with the allocated columns [alloc_col0, alloc_col0 + alloc_cols).
struct UmmaCta {
  const uint8_t* smem;
  uint32_t smem_size;
  uint32_t smem_base_addr;
  uint32_t* tmem;  // 128 x 512 words
  uint32_t alloc_col0;
  uint32_t alloc_cols;
};

// PTX ISA 9.7.16.4.1 "Shared Memory Descriptor" Table 40 (CUTLASS include/cute/arch/mma_sm100_desc.hpp
// UMMA::SmemDescriptor): [0,14) start>>4, [16,30) LBO>>4, [32,46) SBO>>4, [46,49) fixed 0b001, [49,52)
// base offset, [52] LBO mode, [61,64) layout (0 none, 1 128B_base32b, 2 128B, 4 64B, 6 32B).
// pelib.isa.descriptors.decode_umma_smem_desc is the Python twin.
inline SmemDescFields decode_umma_smem_desc(uint64_t d) {
  if ((d >> 46 & 7) != 1)
    model_fail("smem descriptor 0x%016llx: bits 46..48 are %llu, sm_100 needs 0b001 (a Hopper GMMA descriptor "
               "copied to Blackwell misses bit 46): build it with umma_smem_desc", (unsigned long long)d,
               (unsigned long long)(d >> 46 & 7));
  if ((d >> 53 & 0xFF) || (d >> 14 & 3) || (d >> 30 & 3))
    model_fail("smem descriptor 0x%016llx sets reserved bits (14-15, 30-31 or 53-60)", (unsigned long long)d);
  const int lt = int(d >> 61 & 7);
  int sw = lt == 0 ? 0 : lt == 2 ? 128 : lt == 4 ? 64 : lt == 6 ? 32 : -1;
  if (lt == 1) model_fail("smem descriptor 0x%016llx: layout SWIZZLE_128B_BASE32B is not modelled", (unsigned long long)d);
  if (sw < 0) model_fail("smem descriptor 0x%016llx: layout type %d is not defined (3, 5, 7)", (unsigned long long)d, lt);
  if (d >> 52 & 1)
    model_fail("smem descriptor 0x%016llx: the absolute LBO mode (bit 52) is not modelled", (unsigned long long)d);
  return SmemDescFields{uint32_t(d & 0x3FFF) << 4, uint32_t(d >> 16 & 0x3FFF) << 4, uint32_t(d >> 32 & 0x3FFF) << 4,
                        sw, uint32_t(d >> 49 & 7)};
}

struct UmmaIdesc {
  int kind;
  uint32_t m, n;
  int a_fmt, b_fmt, c_fmt;   // format codes of the kind (PTX ISA Tables 42, 43)
  int a_major, b_major;      // 0 K, 1 MN
  int a_neg, b_neg;
  int scale_fmt;             // block-scaled: 0 UE4M3, 1 UE8M0
  int a_sf_id, b_sf_id;
  int k_size;
  int sparse, saturate, max_shift;
};

// PTX ISA 9.7.16.4.2 "Instruction Descriptor" Table 42 (kind::f16/tf32/f8f6f4/i8) and Table 43
// (block-scaled kinds); CUTLASS UMMA::InstrDescriptor / InstrDescriptorBlockScaled. Reserved bits are
// refused as pelib.isa.descriptors.decode_umma_instr_desc(_block_scaled) refuse them.
inline UmmaIdesc decode_umma_idesc(uint32_t v, int kind) {
  UmmaIdesc d{};
  d.kind = kind;
  d.a_fmt = int(v >> 7 & 7);
  d.b_fmt = int(v >> 10 & 7);
  d.a_neg = int(v >> 13 & 1);
  d.b_neg = int(v >> 14 & 1);
  d.a_major = int(v >> 15 & 1);
  d.b_major = int(v >> 16 & 1);
  d.n = (v >> 17 & 0x3F) << 3;
  d.sparse = int(v >> 2 & 1);
  if (kind == UMMA_KIND_F16 || kind == UMMA_KIND_TF32 || kind == UMMA_KIND_F8F6F4 || kind == UMMA_KIND_I8) {
    if (v & (1u << 6 | 1u << 23 | 1u << 29))
      model_fail("instruction descriptor 0x%08x sets a reserved bit (6, 23 or 29) of kind code %d", v, kind);
    d.m = (v >> 24 & 0x1F) << 4;
    d.c_fmt = int(v >> 4 & 3);
    d.saturate = int(v >> 3 & 1);
    d.max_shift = int(v >> 30 & 3);
  } else if (kind == UMMA_KIND_MXF8F6F4 || kind == UMMA_KIND_MXF4 || kind == UMMA_KIND_MXF4NVF4) {
    uint32_t reserved = 1u << 3 | 1u << 6 | 7u << 24 | (kind == UMMA_KIND_MXF8F6F4 ? 1u << 31 : 1u << 12);
    if (v & reserved)
      model_fail("instruction descriptor 0x%08x sets reserved bits 0x%08x of a block-scaled kind (PTX ISA "
                 "Table 43: 3, 6, 24-26, and 12 for mxf4/mxf4nvf4 or 31 for mxf8f6f4)", v, v & reserved);
    d.m = (v >> 27 & 3) << 7;
    if (d.m != 128 && d.m != 256)
      model_fail("instruction descriptor 0x%08x: M>>7 = %u is no block-scaled shape (128 or 256)", v, v >> 27 & 3);
    d.c_fmt = 1;  // block-scaled MMAs accumulate in F32
    d.b_sf_id = int(v >> 4 & 3);
    d.scale_fmt = int(v >> 23 & 1);
    d.a_sf_id = int(v >> 29 & 3);
    d.k_size = int(v >> 31 & 1);
  } else {
    model_fail("MMA kind code %d: 0 f16, 1 tf32, 2 f8f6f4, 3 i8, 4 mxf8f6f4, 5 mxf4, 6 mxf4nvf4", kind);
  }
  return d;
}

namespace detail {

inline void check_tmem_cols(const UmmaCta& c, uint32_t col, uint32_t n, const char* what) {
  if (!c.tmem) model_fail("%s: this CTA has no TMEM image", what);
  if (col + n > TMEM_COLS)
    model_fail("%s uses TMEM columns %u..%u, beyond the 512 columns of tensor memory", what, col, col + n - 1);
  if (c.alloc_cols == 0)
    model_fail("%s uses TMEM columns %u..%u but this CTA holds no allocation (tcgen05.alloc first)", what, col,
               col + n - 1);
  if (col < c.alloc_col0 || col + n > c.alloc_col0 + c.alloc_cols)
    model_fail("%s uses TMEM columns %u..%u, outside the allocation [%u, %u): allocate more columns or fix "
               "the column offset", what, col, col + n - 1, c.alloc_col0, c.alloc_col0 + c.alloc_cols);
}

// Value of element k of row r of an operand given as (rows, kbytes) bytes (K contiguous per row).
struct Operand {
  std::vector<float> v;  // rows x kel
  uint32_t rows = 0, kel = 0;
};

inline Operand decode_operand(const std::vector<uint8_t>& b, uint32_t rows, uint32_t kbytes, int kind, int fmt) {
  Operand o;
  o.rows = rows;
  if (kind == UMMA_KIND_MXF4NVF4) {                      // packed E2M1, low nibble first
    o.kel = kbytes * 2;
    o.v.resize(size_t(rows) * o.kel);
    for (size_t i = 0; i < b.size(); ++i) {
      o.v[2 * i] = e2m1_to_float(b[i] & 15);
      o.v[2 * i + 1] = e2m1_to_float(b[i] >> 4);
    }
  } else if (kind == UMMA_KIND_F8F6F4) {                 // E4M3 (0) / E5M2 (1)
    o.kel = kbytes;
    o.v.resize(b.size());
    for (size_t i = 0; i < b.size(); ++i) o.v[i] = fmt == 0 ? e4m3_to_float(b[i]) : e5m2_to_float(b[i]);
  } else {                                               // kind::f16: F16 (0) / BF16 (1), little endian
    o.kel = kbytes / 2;
    o.v.resize(size_t(rows) * o.kel);
    for (size_t i = 0; i < o.v.size(); ++i) {
      uint16_t h = uint16_t(b[2 * i] | b[2 * i + 1] << 8);
      if (fmt == 1) {
        uint32_t u = uint32_t(h) << 16;
        std::memcpy(&o.v[i], &u, 4);
      } else {
        o.v[i] = f16_to_float(h);
      }
    }
  }
  return o;
}

}  // namespace detail

// Block-scaled MMAs read row r's scale factors from TMEM lane r%128, column col + (r%128)/32, bytes
// sf_id.. of that word: the word tcgen05.cp 32x128b.warpx4 put there from the CUTLASS blocked atom
// (PTX ISA 9.7.16.10 block scaling; CUTLASS mma_traits_sm100_frag tmem_sf_frg; pelib.emulate _mma_scale_bytes).
inline uint8_t umma_scale_byte(const UmmaCta& c, uint32_t sf_taddr, uint32_t row, uint32_t i) {
  const uint32_t col = sf_taddr & 0xFFFF;
  const uint32_t sf_id = sf_taddr >> 30;
  const uint32_t r = row % 128;
  const uint32_t w = c.tmem[size_t(r) * TMEM_COLS + col + r / 32];
  return uint8_t(w >> (8 * (sf_id + i)));
}
inline float umma_scale_factor(const UmmaCta& c, uint32_t sf_taddr, uint32_t row, uint32_t i, int scale_fmt) {
  const uint8_t byte = umma_scale_byte(c, sf_taddr, row, i);
  return scale_fmt == 0 ? ue4m3_to_float(byte) : ue8m0_to_float(byte);
}

// The block-FMA path of umma_mma (kind::f8f6f4 or kind::mxf4nvf4, its checks done there): bbytes holds the
// instruction's B rows (32 bytes of K each), each CTA's A rows are read here, D as umma_mma. The idesc negate
// bits flip the sign of every A (B) element; mxf4nvf4: p.group > 0 MMA-Sim's rule (model/blockfma.h
// block_fma_groups), else each product a b s_a s_b exact, its window exponent the sum of the four
// (model/blockfma.h product()); the scales as umma_scale_byte reads them.
inline void umma_block_fma(int kind, const UmmaIdesc& id, int cta_group, const UmmaCta* ctas, uint32_t dcol,
                           const SmemDescFields& fa, const std::vector<uint8_t>& bbytes, bool enable_input_d,
                           uint32_t sfa_tmem, uint32_t sfb_tmem, const BlockFma& p) {
  const uint32_t N = id.n, kbytes = 32, rows_a = 128;
  const bool scaled = kind == UMMA_KIND_MXF4NVF4;
  const int K = scaled ? 64 : 32;
  check_block_fma(p, K, scaled ? "tcgen05.mma kind::mxf4nvf4" : "tcgen05.mma kind::f8f6f4");
  if (p.block > 64) model_fail("tcgen05.mma: blocks of %d products, at most 64", p.block);
  if (scaled && p.group && p.block % 16)
    model_fail("tcgen05.mma kind::mxf4nvf4: grouped blocks of %d products; a multiple of the 16 per scale", p.block);
  auto fp_elem = [&](const uint8_t* row, int k, bool neg) {   // element k of a K-major row, as the aligner sees it
    Fp f = fp_e2m1_packed(row, k);
    f.neg ^= neg;
    return f;
  };
  auto fp_scale = [&](const UmmaCta& c, uint32_t taddr, uint32_t row, int i) {
    const uint8_t v = umma_scale_byte(c, taddr, row, uint32_t(i));
    return id.scale_fmt == 0 ? fp_ue4m3(v) : fp_ue8m0(v);
  };
  // B: signed bytes (f8f6f4) or decoded factors (mxf4nvf4), once per instruction
  std::vector<uint8_t> bsigned(bbytes);
  if (id.b_neg) for (auto& x : bsigned) x ^= 0x80;
  std::vector<Fp> bq, bs;
  std::vector<int32_t> b2;   // mxf4nvf4: B's elements as e2m1_halves, once per instruction
  F8Rows rb, ra;   // f8f6f4: the operand rows decoded once per instruction
  if (!scaled) {
    check_dot_f8(p, K, id.a_fmt, id.b_fmt, "tcgen05.mma kind::f8f6f4");
    rb.decode(bsigned.data(), int(N), K, id.b_fmt);
  }
  if (scaled) {
    bq.resize(size_t(N) * K);
    bs.resize(size_t(N) * 4);
    b2.resize(size_t(N) * K);
    for (uint32_t n = 0; n < N; ++n) {
      for (int k = 0; k < K; ++k) bq[size_t(n) * K + k] = fp_elem(&bbytes[size_t(n) * kbytes], k, id.b_neg);
      for (int k = 0; k < K; ++k) b2[size_t(n) * K + k] = e2m1_halves(bq[size_t(n) * K + k]);
      for (int i = 0; i < 4; ++i) bs[size_t(n) * 4 + i] = fp_scale(ctas[0], sfb_tmem, n, i);
    }
  }
  for (int v = 0; v < cta_group; ++v) {
    const UmmaCta& c = ctas[v];
    std::vector<uint8_t> abytes(size_t(rows_a) * kbytes);
    if (id.a_major)
      read_mnmajor(fa, rows_a, kbytes, 1, c.smem, c.smem_size, c.smem_base_addr, abytes.data(), "tcgen05.mma A");
    else
      read_kmajor(fa, rows_a, kbytes, c.smem, c.smem_size, c.smem_base_addr, abytes.data(), "tcgen05.mma A");
    if (id.a_neg && !scaled) for (auto& x : abytes) x ^= 0x80;
    if (!arithmetic_on()) continue;   // operands read and checked, D left as it was
    if (!scaled) ra.decode(abytes.data(), int(rows_a), K, id.a_fmt);
    for (uint32_t m = 0; m < rows_a; ++m) {
      uint32_t* drow = c.tmem + size_t(m) * TMEM_COLS + dcol;
      Fp aq[64], as[4];
      int32_t a2[64];
      if (scaled) {
        for (int k = 0; k < K; ++k) aq[k] = fp_elem(&abytes[size_t(m) * kbytes], k, id.a_neg), a2[k] = e2m1_halves(aq[k]);
        for (int i = 0; i < 4; ++i) as[i] = fp_scale(c, sfa_tmem, m, i);
      }
      for (uint32_t n = 0; n < N; ++n) {
        uint32_t d = drow[n];
        if (!scaled) {
          d = dot_f8_rows(ra, int(m), rb, int(n), d, enable_input_d, p);
        } else {
          d = dot_mxf4(aq, &bq[size_t(n) * K], as, &bs[size_t(n) * 4], d, enable_input_d, id.scale_fmt, p, a2,
                       &b2[size_t(n) * K]);
        }
        drow[n] = d;
      }
    }
  }
}

// PTX ISA 9.7.16.10 tcgen05.mma (and .block_scale.block16 for kind::mxf4nvf4):
// D = (enable_input_d ? D : 0) + A * B^T, A M x K from shared memory, B N x K, D M x N FP32 in TMEM.
// K per instruction is 32 bytes of each row: 16 (f16), 32 (f8f6f4, E4M3/E5M2), 64 (mxf4nvf4, packed E2M1).
// cta_group::1, M = 128: D row m -> lane m, column (d_tmem & 0xFFFF) + n (pelib.emulate tmem_accumulator_map).
// cta_group::2, M = 256: ctas[0] is the even CTA of the pair, ctas[1] its peer. CTA v reads A rows
// [128v, 128v+128) from its own shared memory and B rows [v*N/2, (v+1)*N/2) from its own shared memory,
// through the same descriptors, and its TMEM lanes 0..127 get D rows [128v, 128v+128), all N columns
// (PTX ISA 9.7.16.10: B "in Shared Memory of the current CTA and optionally in peer CTA"; CUTLASS
// media/docs/pythonDSL/guides/mma/tcgen05_programming.rst; pelib.emulate cta_pair_split).
// Block16 scale factors: A row m's 4 scales from sfa_tmem (in CTA 0), B row n's from sfb_tmem; each
// scales 16 consecutive K elements. Arithmetic (model/blockfma.h): kind::f8f6f4 and kind::mxf4nvf4 under
// accumulation().umma_f8f6f4 / umma_mxf4nvf4, by default MMA-Sim's hardware-validated Blackwell rules
// (arXiv 2511.10909; modelled, not yet run on a B200 here: f8f6f4 25 fraction bits; mxf4nvf4 exact sums of
// 16 products, windows from the scales, 35 fraction bits), or EXACT_SUM; kind::f16 the
// exact sum (products and their sum in double, one rounding to FP32 per instruction).
inline void umma_mma(int kind, int cta_group, const UmmaCta* ctas, uint32_t d_tmem, uint64_t adesc,
                     uint64_t bdesc, uint32_t idesc, bool enable_input_d, uint32_t sfa_tmem = 0,
                     uint32_t sfb_tmem = 0) {
  if (cta_group != 1 && cta_group != 2) model_fail("tcgen05.mma: cta_group must be 1 or 2, got %d", cta_group);
  UmmaIdesc id = decode_umma_idesc(idesc, kind);
  const bool scaled = kind == UMMA_KIND_MXF4NVF4;
  if (kind != UMMA_KIND_F16 && kind != UMMA_KIND_F8F6F4 && !scaled)
    model_fail("tcgen05.mma kind code %d is not modelled (f16 0, f8f6f4 2, mxf4nvf4 6 are)", kind);
  if (id.sparse) model_fail("sparse tcgen05.mma (idesc bit 2) is not modelled");
  if (id.c_fmt != 1) model_fail("tcgen05.mma D format %d: only F32 accumulators (c_format 1) are modelled", id.c_fmt);
  if (id.max_shift) model_fail("idesc max_shift (.ws only) must be 0");
  if (kind == UMMA_KIND_F16 && id.a_fmt > 1) model_fail("kind::f16 A format %d: F16 (0) or BF16 (1)", id.a_fmt);
  if (kind == UMMA_KIND_F16 && id.b_fmt > 1) model_fail("kind::f16 B format %d: F16 (0) or BF16 (1)", id.b_fmt);
  if (kind == UMMA_KIND_F8F6F4 && (id.a_fmt > 1 || id.b_fmt > 1))
    model_fail("kind::f8f6f4 formats A %d, B %d: only E4M3 (0) and E5M2 (1) are modelled", id.a_fmt, id.b_fmt);
  if (scaled) {
    if (id.a_fmt != 1 || id.b_fmt != 1)
      model_fail("kind::mxf4nvf4 formats A %d, B %d: packed E2M1 is code 1 (5 is f8f6f4's)", id.a_fmt, id.b_fmt);
    if (id.a_major || id.b_major) model_fail("kind::mxf4nvf4 takes K-major A and B only");
    if (id.k_size) model_fail("kind::mxf4nvf4 K96 (idesc bit 31) is not modelled");
    if (id.a_sf_id || id.b_sf_id || (sfa_tmem >> 30) || (sfb_tmem >> 30))
      model_fail("block16 scale-factor IDs must be 0 (idesc a_sf_id %d, b_sf_id %d; address bits 30-31)",
                 id.a_sf_id, id.b_sf_id);
    if (cta_group != 1) model_fail("block-scaled tcgen05.mma with cta_group::2 is not modelled");
    if (id.n > 128) model_fail("block-scaled tcgen05.mma with N = %u > 128 is not modelled", id.n);
  }
  const uint32_t M = id.m, N = id.n;
  if (cta_group == 1 && M != 128)
    model_fail("tcgen05.mma cta_group::1 with M = %u is not modelled (the M = 128 layout is: lane = row)", M);
  if (cta_group == 2 && M != 256)
    model_fail("tcgen05.mma cta_group::2 with M = %u is not modelled (M = 256: 128 rows per CTA)", M);
  if (N < 8 || N > 256 || N % 8 || (cta_group == 2 && N % 16))
    model_fail("tcgen05.mma N = %u: a multiple of 8 in 8..256 (of 16 with cta_group::2, split in halves)", N);
  if ((d_tmem >> 16) != 0) model_fail("tcgen05.mma D address 0x%08x: the lane field must be 0 for M = %u", d_tmem, M);
  const uint32_t dcol = d_tmem & 0xFFFF;
  for (int v = 0; v < cta_group; ++v) detail::check_tmem_cols(ctas[v], dcol, N, "tcgen05.mma D");
  if (scaled) {
    detail::check_tmem_cols(ctas[0], sfa_tmem & 0xFFFF, 4, "tcgen05.mma scale factors A");
    detail::check_tmem_cols(ctas[0], sfb_tmem & 0xFFFF, 4, "tcgen05.mma scale factors B");
    if ((sfa_tmem >> 16 & 0x3FFF) || (sfb_tmem >> 16 & 0x3FFF))
      model_fail("tcgen05.mma scale-factor addresses 0x%08x / 0x%08x: the lane field must be 0", sfa_tmem, sfb_tmem);
  }
  const SmemDescFields fa = decode_umma_smem_desc(adesc), fb = decode_umma_smem_desc(bdesc);
  const uint32_t kbytes = 32, rows_a = 128, rows_b = N / uint32_t(cta_group);
  const uint32_t eb_a = kind == UMMA_KIND_F16 ? 2 : 1;
  // B rows of the whole instruction (both halves for cta_group::2).
  std::vector<uint8_t> bbytes(size_t(N) * kbytes);
  for (int v = 0; v < cta_group; ++v) {
    const UmmaCta& c = ctas[v];
    if (id.b_major)
      read_mnmajor(fb, rows_b, kbytes, eb_a, c.smem, c.smem_size, c.smem_base_addr, &bbytes[size_t(v) * rows_b * kbytes], "tcgen05.mma B");
    else
      read_kmajor(fb, rows_b, kbytes, c.smem, c.smem_size, c.smem_base_addr, &bbytes[size_t(v) * rows_b * kbytes], "tcgen05.mma B");
  }
  const BlockFma& bf = kind == UMMA_KIND_F8F6F4 ? accumulation().umma_f8f6f4 : accumulation().umma_mxf4nvf4;
  if (kind != UMMA_KIND_F16 && bf.frac_bits != 0) {   // the block FMA on the operand bytes
    umma_block_fma(kind, id, cta_group, ctas, dcol, fa, bbytes, enable_input_d, sfa_tmem, sfb_tmem, bf);
    return;
  }
  detail::Operand B = detail::decode_operand(bbytes, N, kbytes, kind, id.b_fmt);
  const uint32_t K = B.kel;
  if (scaled)
    for (uint32_t n = 0; n < N; ++n)
      for (uint32_t k = 0; k < K; ++k) B.v[size_t(n) * K + k] *= umma_scale_factor(ctas[0], sfb_tmem, n, k / 16, id.scale_fmt);
  if (id.b_neg) for (auto& x : B.v) x = -x;
  for (int v = 0; v < cta_group; ++v) {
    const UmmaCta& c = ctas[v];
    std::vector<uint8_t> abytes(size_t(rows_a) * kbytes);
    if (id.a_major)
      read_mnmajor(fa, rows_a, kbytes, eb_a, c.smem, c.smem_size, c.smem_base_addr, abytes.data(), "tcgen05.mma A");
    else
      read_kmajor(fa, rows_a, kbytes, c.smem, c.smem_size, c.smem_base_addr, abytes.data(), "tcgen05.mma A");
    detail::Operand A = detail::decode_operand(abytes, rows_a, kbytes, kind, id.a_fmt);
    if (scaled)
      for (uint32_t m = 0; m < rows_a; ++m)
        for (uint32_t k = 0; k < K; ++k) A.v[size_t(m) * K + k] *= umma_scale_factor(c, sfa_tmem, m, k / 16, id.scale_fmt);
    if (id.a_neg) for (auto& x : A.v) x = -x;
    for (uint32_t m = 0; m < rows_a; ++m) {
      const float* ar = &A.v[size_t(m) * K];
      uint32_t* drow = c.tmem + size_t(m) * TMEM_COLS + dcol;
      for (uint32_t n = 0; n < N; ++n) {
        const float* br = &B.v[size_t(n) * K];
        double s = 0.0;
        if (enable_input_d) {
          float d;
          std::memcpy(&d, &drow[n], 4);
          s = d;
        }
        for (uint32_t k = 0; k < K; ++k) s += double(ar[k]) * double(br[k]);
        float r = float(s);
        std::memcpy(&drow[n], &r, 4);
      }
    }
  }
}

// PTX ISA 9.7.16.8.3 tcgen05.ld (.32x32b, Figure "Matrix fragment for shape .32x32b"): thread t of warp
// `warp` gets, in register i, the word at lane (taddr >> 16) + t, column (taddr & 0xFFFF) + i. A warp may
// access only lanes 32*(warp%4)..+31 (PTX ISA 9.7.16.1 Tensor Memory: access restrictions), so the lane field must be
// 32*(warp%4). regs[t * x + i] receives the word (pelib.emulate tcgen05_ld_32x32b / tmem_ld_map).
inline void tmem_ld_32x32b(const UmmaCta& c, int warp, uint32_t taddr, int x, uint32_t* regs) {
  if (x < 1 || x > 128 || (x & (x - 1)))
    model_fail("tcgen05.ld.32x32b.x%d: .num is one of x1, x2, x4, ..., x128", x);
  const uint32_t lane = taddr >> 16, col = taddr & 0xFFFF;
  const uint32_t q = 32u * uint32_t(warp % 4);
  if (lane != q)
    model_fail("tcgen05.ld.32x32b by warp %d asks for TMEM lane %u: a warp reads only lanes %u..%u (lane quarter "
               "warp %% 4); use taddr = tmem_base + (%u << 16) + column", warp, lane, q, q + 31, q);
  detail::check_tmem_cols(c, col, uint32_t(x), "tcgen05.ld.32x32b");
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < x; ++i) regs[t * x + i] = c.tmem[size_t(lane + t) * TMEM_COLS + col + i];
}

// PTX ISA 9.7.16.8.4 tcgen05.st (.32x32b): the reverse of tmem_ld_32x32b, regs[t * x + i] -> (lane, column).
inline void tmem_st_32x32b(const UmmaCta& c, int warp, uint32_t taddr, int x, const uint32_t* regs) {
  if (x < 1 || x > 128 || (x & (x - 1)))
    model_fail("tcgen05.st.32x32b.x%d: .num is one of x1, x2, x4, ..., x128", x);
  const uint32_t lane = taddr >> 16, col = taddr & 0xFFFF;
  const uint32_t q = 32u * uint32_t(warp % 4);
  if (lane != q)
    model_fail("tcgen05.st.32x32b by warp %d names TMEM lane %u: a warp writes only lanes %u..%u (lane quarter "
               "warp %% 4)", warp, lane, q, q + 31);
  detail::check_tmem_cols(c, col, uint32_t(x), "tcgen05.st.32x32b");
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < x; ++i) c.tmem[size_t(lane + t) * TMEM_COLS + col + i] = regs[t * x + i];
}

// PTX ISA 9.7.16.9.2 tcgen05.cp (.32x128b.warpx4; CUTLASS copy_sm100.hpp SM100_UTCCP_4x32dp128bit_1cta):
// 32 rows x 16 B from shared memory, read through `src_desc` as a K-major operand (8-row core matrices at
// SBO), to columns col..col+3 of every 32-lane group: lane 32*w + r, column col + j <- bytes 4j..4j+3 of
// row r (little endian), for w = 0..3 (pelib.emulate tcgen05_cp_32x128b_warpx4).
inline void tmem_cp_32x128b_warpx4(const UmmaCta& c, uint32_t taddr, uint64_t src_desc) {
  if (taddr >> 16) model_fail("tcgen05.cp.32x128b.warpx4 address 0x%08x: the lane field must be 0 (it fills all 4 lane groups)", taddr);
  const uint32_t col = taddr & 0xFFFF;
  detail::check_tmem_cols(c, col, 4, "tcgen05.cp.32x128b.warpx4");
  const SmemDescFields f = decode_umma_smem_desc(src_desc);
  uint8_t b[32 * 16];
  read_kmajor(f, 32, 16, c.smem, c.smem_size, c.smem_base_addr, b, "tcgen05.cp source");
  for (int r = 0; r < 32; ++r)
    for (int j = 0; j < 4; ++j) {
      uint32_t w;
      std::memcpy(&w, &b[r * 16 + 4 * j], 4);
      for (int g = 0; g < 4; ++g) c.tmem[size_t(32 * g + r) * TMEM_COLS + col + j] = w;
    }
}

}  // namespace pe_sim
