// The C ABI of the data-path models: what pelib (ctypes) and tests/test_sim_models.py call.
// Each function returns 0 on success, or 1 with the ModelError text copied into err[0, err_len).
// The engine links this translation unit into its host build (pe_sim_encode_tensormap is called by
// pelib.sim); the C++ API in the headers is what the simulated twins of src/kernels/common use.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/error.h"
#include "model/tensormap.h"
#include "model/tma_box.h"

namespace {
int fail(char* err, uint64_t err_len, const std::string& what) {
  if (err && err_len) {
    size_t n = std::min<size_t>(what.size(), size_t(err_len - 1));
    std::memcpy(err, what.data(), n);
    err[n] = 0;
  }
  return 1;
}
}  // namespace

#define PE_SIM_TRY(...)                                  \
  try {                                                  \
    __VA_ARGS__;                                         \
    return 0;                                            \
  } catch (const pe_sim::ModelError& e) {                \
    return fail(err, err_len, e.what);                   \
  } catch (const std::exception& e) {                    \
    return fail(err, err_len, e.what());                 \
  }

extern "C" {

// See model/tensormap.h for the argument list.
int pe_sim_encode_tensormap(void* out128, int dtype_code, int elem_bytes, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box, const uint32_t* estrides, int swizzle,
                            int interleave, int oob_fill, int l2_promotion, uint64_t global_address, char* err,
                            uint64_t err_len) {
  if (!out128) return fail(err, err_len, "out128 is null");
  PeSimTensorMap m;
  std::string why = pe_sim::encode_tensormap(m, dtype_code, elem_bytes, rank, dims, strides, box, estrides,
                                             swizzle, interleave, oob_fill, l2_promotion, global_address);
  if (!why.empty()) return fail(err, err_len, "tensor map is invalid (cuTensorMapEncodeTiled rules): " + why);
  std::memcpy(out128, &m, sizeof m);
  return 0;
}

// Any ModelError of tensormap_from (e.g. a driver-encoded map) as text; 0 when the 128 bytes are valid.
int pe_sim_check_tensormap(const void* map128, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::tensormap_from(map128))
}

// tma_load_box / tma_store_box (model/tma_box.h); *bytes = the complete_tx count / bytes read.
int pe_sim_tma_load_box(const void* map128, const int32_t* coords, int ncoords, uint8_t* smem, uint32_t smem_size,
                        uint32_t smem_base_addr, uint32_t dst_addr, uint32_t* bytes, char* err, uint64_t err_len) {
  PE_SIM_TRY(uint32_t b = pe_sim::tma_load_box(pe_sim::tensormap_from(map128), coords, ncoords, smem, smem_size,
                                               smem_base_addr, dst_addr);
             if (bytes) *bytes = b)
}

int pe_sim_tma_store_box(const void* map128, const int32_t* coords, int ncoords, const uint8_t* smem,
                         uint32_t smem_size, uint32_t smem_base_addr, uint32_t src_addr, uint32_t* bytes, char* err,
                         uint64_t err_len) {
  PE_SIM_TRY(uint32_t b = pe_sim::tma_store_box(pe_sim::tensormap_from(map128), coords, ncoords, smem, smem_size,
                                                smem_base_addr, src_addr);
             if (bytes) *bytes = b)
}

}  // extern "C"

#include "model/gmma.h"

extern "C" {

// decode_gmma_desc: out4 = {start, lbo, sbo, swizzle}, *base_offset.
int pe_sim_decode_gmma_desc(uint64_t desc, uint32_t* out4, uint32_t* base_offset, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::SmemDescFields f = pe_sim::decode_gmma_desc(desc); out4[0] = f.start; out4[1] = f.lbo;
             out4[2] = f.sbo; out4[3] = uint32_t(f.swizzle); *base_offset = f.base_offset)
}

// The bytes a K-major operand of `rows` x `kbytes` occupies through a wgmma descriptor (row-major out).
int pe_sim_read_gmma_operand(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t desc,
                             uint32_t rows, uint32_t kbytes, uint8_t* out, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::read_kmajor(pe_sim::decode_gmma_desc(desc), rows, kbytes, smem, smem_size, smem_base_addr,
                                 out, "operand"))
}

// gmma_e4m3 with the 128 threads' fragments stored contiguously: acc[t * (N/2) + i].
int pe_sim_gmma_e4m3(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t adesc,
                     uint64_t bdesc, int N, int scale_d, float* acc, char* err, uint64_t err_len) {
  float* rows[128];
  for (int t = 0; t < 128; ++t) rows[t] = acc + size_t(t) * (N > 0 ? N / 2 : 0);
  PE_SIM_TRY(pe_sim::gmma_e4m3(smem, smem_size, smem_base_addr, adesc, bdesc, N, scale_d != 0, rows))
}

// gmma_f8 (fmt 0 E4M3, 1 E5M2) under the block FMA p6 = {frac_bits, out_bits, min_exp, block, round_nearest,
// group} (null: accumulation().wgmma_f8), fragments as pe_sim_gmma_e4m3.
int pe_sim_gmma_f8(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t adesc, uint64_t bdesc,
                   int N, int fmt, int scale_d, float* acc, const int32_t* p6, char* err, uint64_t err_len) {
  float* rows[128];
  for (int t = 0; t < 128; ++t) rows[t] = acc + size_t(t) * (N > 0 ? N / 2 : 0);
  const pe_sim::BlockFma p = p6 ? pe_sim::BlockFma{p6[0], p6[1], p6[2], p6[3], p6[4], p6[5]}
                                : pe_sim::accumulation().wgmma_f8;
  PE_SIM_TRY(pe_sim::gmma_f8(smem, smem_size, smem_base_addr, adesc, bdesc, N, fmt, scale_d != 0, rows, p))
}

// The engine's accumulation (model/blockfma.h accumulation()): p18 = wgmma_f8, umma_f8f6f4, umma_mxf4nvf4,
// six ints each as above. set checks every field; get copies them out (defaults: the header's constants).
int pe_sim_set_accumulation(const int32_t* p18, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::BlockFma q[3];
             for (int i = 0; i < 3; ++i) q[i] = pe_sim::BlockFma{p18[6 * i], p18[6 * i + 1], p18[6 * i + 2],
                                                                   p18[6 * i + 3], p18[6 * i + 4], p18[6 * i + 5]};
             pe_sim::check_block_fma(q[0], 32, "wgmma accumulation"); pe_sim::check_block_fma(q[1], 32, "kind::f8f6f4");
             pe_sim::check_block_fma(q[2], 64, "kind::mxf4nvf4");
             if (q[0].group || q[1].group) pe_sim::model_fail("FP8 accumulations have no scales: group must be 0");
             pe_sim::accumulation() = pe_sim::Accumulation{q[0], q[1], q[2]})
}

// Whether wgmma and tcgen05.mma compute their outputs in the next launches (model/blockfma.h arithmetic_on).
int pe_sim_set_arithmetic(int on) {
  pe_sim::arithmetic_on() = on != 0;
  return 0;
}

int pe_sim_get_accumulation(int32_t* p18, int defaults) {
  static const pe_sim::Accumulation initial = pe_sim::Accumulation{
      pe_sim::WGMMA_F8_H100, pe_sim::UMMA_F8F6F4_B200, pe_sim::UMMA_MXF4NVF4_B200};
  const pe_sim::Accumulation& a = defaults ? initial : pe_sim::accumulation();
  const pe_sim::BlockFma* q[3] = {&a.wgmma_f8, &a.umma_f8f6f4, &a.umma_mxf4nvf4};
  for (int i = 0; i < 3; ++i) {
    const int32_t v[6] = {q[i]->frac_bits, q[i]->out_bits, q[i]->min_exp, q[i]->block, q[i]->round_nearest,
                          q[i]->group};
    std::memcpy(p18 + 6 * i, v, sizeof v);
  }
  return 0;
}

// dot_f8 over probe-style tiles: out[t][i][j] = A[t][i] . B[t][j] + D[t][i][j] (A u8 [tiles][m][k], B u8
// [tiles][n][k], D and out FP32 bits [tiles][m][n]) as k / k_instr instructions of k_instr products in K
// order, scale-d of the first one = first_scale_d; p6 as pe_sim_gmma_f8 (null: accumulation().wgmma_f8).
// Each instruction's rows are decoded once (F8Rows, dot_f8_rows), as wgmma and tcgen05.mma run them.
namespace {
void dot_f8_tiles(const uint8_t* a, const uint8_t* b, const uint32_t* d, uint32_t* out, int64_t tiles, int m, int n,
                  int k, int k_instr, int fmt_a, int fmt_b, int first_scale_d, const pe_sim::BlockFma& p,
                  const char* what) {
  if (k_instr < 1 || k_instr > 64 || k % k_instr)
    pe_sim::model_fail("k = %d in instructions of %d products: 1..64 dividing k", k, k_instr);
  pe_sim::check_dot_f8(p, k_instr, fmt_a, fmt_b, what);
  std::vector<uint8_t> ca(size_t(m) * k_instr), cb(size_t(n) * k_instr);
  pe_sim::F8Rows ra, rb;
  for (int64_t t = 0; t < tiles; ++t) {
    const size_t o0 = size_t(t) * m * n;
    for (size_t o = 0; o < size_t(m) * n; ++o) out[o0 + o] = d[o0 + o];
    for (int s = 0; s < k; s += k_instr) {
      for (int i = 0; i < m; ++i) std::memcpy(&ca[size_t(i) * k_instr], a + (size_t(t) * m + i) * k + s, k_instr);
      for (int j = 0; j < n; ++j) std::memcpy(&cb[size_t(j) * k_instr], b + (size_t(t) * n + j) * k + s, k_instr);
      ra.decode(ca.data(), m, k_instr, fmt_a);
      rb.decode(cb.data(), n, k_instr, fmt_b);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          uint32_t& acc = out[o0 + size_t(i) * n + j];
          acc = pe_sim::dot_f8_rows(ra, i, rb, j, acc, s > 0 || first_scale_d, p);
        }
    }
  }
}
}  // namespace

int pe_sim_dot_f8_tiles(const uint8_t* a, const uint8_t* b, const uint32_t* d, uint32_t* out, int64_t tiles, int m,
                        int n, int k, int k_instr, int fmt, int first_scale_d, const int32_t* p6, char* err,
                        uint64_t err_len) {
  const pe_sim::BlockFma p = p6 ? pe_sim::BlockFma{p6[0], p6[1], p6[2], p6[3], p6[4], p6[5]}
                                : pe_sim::accumulation().wgmma_f8;
  PE_SIM_TRY(dot_f8_tiles(a, b, d, out, tiles, m, n, k, k_instr, fmt, fmt, first_scale_d, p, "dot_f8_tiles");)
}

// The same with A and B in their own formats (fmt_a, fmt_b: 0 E4M3, 1 E5M2), as kind::f8f6f4 mixes them
// (umma_block_fma's dot_f8_rows with B's format).
int pe_sim_dot_f8x_tiles(const uint8_t* a, const uint8_t* b, const uint32_t* d, uint32_t* out, int64_t tiles, int m,
                         int n, int k, int k_instr, int fmt_a, int fmt_b, int first_scale_d, const int32_t* p6,
                         char* err, uint64_t err_len) {
  const pe_sim::BlockFma p = p6 ? pe_sim::BlockFma{p6[0], p6[1], p6[2], p6[3], p6[4], p6[5]}
                                : pe_sim::accumulation().umma_f8f6f4;
  PE_SIM_TRY(dot_f8_tiles(a, b, d, out, tiles, m, n, k, k_instr, fmt_a, fmt_b, first_scale_d, p, "dot_f8x_tiles");)
}

}  // extern "C"

#include "model/umma.h"

extern "C" {

// tcgen05.mma kind::mxf4nvf4's arithmetic (umma_block_fma's, without the descriptors and TMEM) over
// probe-style tiles: packed E2M1 A u8 [tiles][m][k/2] and B [tiles][n][k/2] (low nibble first), their scales
// sfa u8 [tiles][m][k/16], sfb [tiles][n][k/16] (scale_fmt 0 UE4M3, 1 UE8M0), D and out FP32 bits
// [tiles][m][n]; k / 64 instructions in K order, scale-d of the first = first_scale_d; p6 as pe_sim_gmma_f8
// (null: accumulation().umma_mxf4nvf4).
int pe_sim_dot_mxf4_tiles(const uint8_t* a, const uint8_t* sfa, const uint8_t* b, const uint8_t* sfb, const uint32_t* d,
                          uint32_t* out, int64_t tiles, int m, int n, int k, int scale_fmt, int first_scale_d,
                          const int32_t* p6, char* err, uint64_t err_len) {
  const pe_sim::BlockFma p = p6 ? pe_sim::BlockFma{p6[0], p6[1], p6[2], p6[3], p6[4], p6[5]}
                                : pe_sim::accumulation().umma_mxf4nvf4;
  PE_SIM_TRY(if (k < 64 || k % 64) pe_sim::model_fail("k = %d: whole instructions of 64 E2M1 products", k);
             if (scale_fmt != 0 && scale_fmt != 1) pe_sim::model_fail("scale_fmt %d: 0 UE4M3, 1 UE8M0", scale_fmt);
             if (p.frac_bits == 0) pe_sim::model_fail("dot_mxf4_tiles models the block FMA (frac_bits > 0)");
             pe_sim::check_block_fma(p, 64, "dot_mxf4_tiles");
             auto fp_scale = [&](uint8_t v) { return scale_fmt == 0 ? pe_sim::fp_ue4m3(v) : pe_sim::fp_ue8m0(v); };
             std::vector<pe_sim::Fp> av(static_cast<size_t>(k)), bv(static_cast<size_t>(k));
             std::vector<pe_sim::Fp> as(static_cast<size_t>(k / 16)), bs(static_cast<size_t>(k / 16));
             for (int64_t t = 0; t < tiles; ++t) for (int i = 0; i < m; ++i) {
               const size_t ra = size_t(t) * m + i;
               for (int x = 0; x < k; ++x) av[x] = pe_sim::fp_e2m1_packed(a + ra * (k / 2), x);
               for (int x = 0; x < k / 16; ++x) as[x] = fp_scale(sfa[ra * (k / 16) + x]);
               for (int j = 0; j < n; ++j) {
                 const size_t rb = size_t(t) * n + j, o = ra * n + j;
                 for (int x = 0; x < k; ++x) bv[x] = pe_sim::fp_e2m1_packed(b + rb * (k / 2), x);
                 for (int x = 0; x < k / 16; ++x) bs[x] = fp_scale(sfb[rb * (k / 16) + x]);
                 uint32_t acc = d[o];
                 for (int s = 0; s < k; s += 64)
                   acc = pe_sim::dot_mxf4(&av[s], &bv[s], &as[s / 16], &bs[s / 16], acc, s > 0 || first_scale_d,
                                          scale_fmt, p);
                 out[o] = acc;
               }
             })
}

// decode_umma_smem_desc: out4 = {start, lbo, sbo, swizzle}, *base_offset.
int pe_sim_decode_umma_smem_desc(uint64_t desc, uint32_t* out4, uint32_t* base_offset, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::SmemDescFields f = pe_sim::decode_umma_smem_desc(desc); out4[0] = f.start; out4[1] = f.lbo;
             out4[2] = f.sbo; out4[3] = uint32_t(f.swizzle); *base_offset = f.base_offset)
}

// decode_umma_idesc: out16 = {m, n, a_fmt, b_fmt, c_fmt, a_major, b_major, a_neg, b_neg, scale_fmt, a_sf_id,
// b_sf_id, k_size, sparse, saturate, max_shift}.
int pe_sim_decode_umma_idesc(uint32_t idesc, int kind, int32_t* out16, char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::UmmaIdesc d = pe_sim::decode_umma_idesc(idesc, kind);
             const int32_t v[16] = {int32_t(d.m), int32_t(d.n), d.a_fmt, d.b_fmt, d.c_fmt, d.a_major, d.b_major,
                                    d.a_neg, d.b_neg, d.scale_fmt, d.a_sf_id, d.b_sf_id, d.k_size, d.sparse,
                                    d.saturate, d.max_shift};
             std::memcpy(out16, v, sizeof v))
}

// The bytes of an operand read through an sm_100 descriptor, K-major (elem_bytes ignored) or MN-major.
int pe_sim_read_umma_operand(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint64_t desc,
                             uint32_t rows, uint32_t kbytes, int mn_major, uint32_t elem_bytes, uint8_t* out,
                             char* err, uint64_t err_len) {
  PE_SIM_TRY(pe_sim::SmemDescFields f = pe_sim::decode_umma_smem_desc(desc);
             if (mn_major) pe_sim::read_mnmajor(f, rows, kbytes, elem_bytes, smem, smem_size, smem_base_addr, out, "operand");
             else pe_sim::read_kmajor(f, rows, kbytes, smem, smem_size, smem_base_addr, out, "operand"))
}

// umma_mma over `cta_group` CTAs given as parallel arrays (CTA 0 = the even CTA of the pair).
int pe_sim_umma_mma(int kind, int cta_group, const uint8_t* const* smem, const uint32_t* smem_size,
                    const uint32_t* smem_base_addr, uint32_t* const* tmem, const uint32_t* alloc_col0,
                    const uint32_t* alloc_cols, uint32_t d_tmem, uint64_t adesc, uint64_t bdesc, uint32_t idesc,
                    int enable_input_d, uint32_t sfa_tmem, uint32_t sfb_tmem, char* err, uint64_t err_len) {
  pe_sim::UmmaCta c[2] = {};
  for (int v = 0; v < cta_group && v < 2; ++v)
    c[v] = pe_sim::UmmaCta{smem[v], smem_size[v], smem_base_addr[v], tmem[v], alloc_col0[v], alloc_cols[v]};
  PE_SIM_TRY(pe_sim::umma_mma(kind, cta_group, c, d_tmem, adesc, bdesc, idesc, enable_input_d != 0, sfa_tmem, sfb_tmem))
}

// tmem_ld_32x32b: regs[t * x + i].
int pe_sim_tmem_ld_32x32b(uint32_t* tmem, uint32_t alloc_col0, uint32_t alloc_cols, int warp, uint32_t taddr, int x,
                          uint32_t* regs, char* err, uint64_t err_len) {
  pe_sim::UmmaCta c{nullptr, 0, 0, tmem, alloc_col0, alloc_cols};
  PE_SIM_TRY(pe_sim::tmem_ld_32x32b(c, warp, taddr, x, regs))
}

int pe_sim_tmem_cp_32x128b_warpx4(const uint8_t* smem, uint32_t smem_size, uint32_t smem_base_addr, uint32_t* tmem,
                                  uint32_t alloc_col0, uint32_t alloc_cols, uint32_t taddr, uint64_t src_desc,
                                  char* err, uint64_t err_len) {
  pe_sim::UmmaCta c{smem, smem_size, smem_base_addr, tmem, alloc_col0, alloc_cols};
  PE_SIM_TRY(pe_sim::tmem_cp_32x128b_warpx4(c, taddr, src_desc))
}

}  // extern "C"
