// The simulator's tensor map: what cuTensorMapEncodeTiled is given, stored in the 128 bytes of the
// opaque CUtensorMap a kernel receives as `const __grid_constant__ CUtensorMap` (common/tma.cuh
// TensorMap: 16 x u64, 64-B aligned). The host side (pelib.sim.tensormap.encode, or the C ABI
// pe_sim_encode_tensormap below) fills it from the same pelib.tma.TensorMapSpec the GPU path encodes;
// the simulated TMA (tma_box.h) reads it back through pe_sim::tensormap_from().
//
// Byte layout (little endian; every field a fixed offset, reserved bytes zero):
//   0   u32 magic = PE_SIM_TMAP_MAGIC ("PESM")    4  u8 version (1)   5 u8 rank (1..5)
//   6   u8  elem_bytes (1, 2, 4, 8)               7  u8 dtype code (index in pelib.tma.DTYPES)
//   8   u64 global_address (host pointer of element (0,...,0))
//   16  u64 dims[5]        globalDim, elements, innermost first (unused entries 0)
//   56  u64 strides[4]     globalStrides of dims[1..rank), bytes
//   88  u16 box[5]         boxDim, elements
//   98  u8  estrides[5]    elementStrides
//   103 u8  swizzle        0, 32, 64, 128 (bytes of the swizzle span)
//   104 u8  interleave     0 (16 and 32 are refused: not modelled)
//   105 u8  oob_fill       0 = zero (FLOAT_OOB_FILL_NONE), 1 = NaN request (refused by the model)
//   106 u8  l2_promotion   0, 1, 2, 3 for none, 64B, 128B, 256B (no effect on data)
//   107..127 reserved (0)
//
// C ABI (defined once in model/abi.cpp; pelib.sim calls it through ctypes):
//   int pe_sim_encode_tensormap(void* out128, int dtype_code, int elem_bytes, int rank,
//         const uint64_t* dims /*rank*/, const uint64_t* strides /*rank-1, bytes*/,
//         const uint32_t* box /*rank*/, const uint32_t* estrides /*rank, or NULL = ones*/,
//         int swizzle /*0,32,64,128*/, int interleave /*0*/, int oob_fill /*0 zero, 1 nan*/,
//         int l2_promotion /*0,64,128,256 bytes*/, uint64_t global_address,
//         char* err, uint64_t err_len)
//   returns 0 and fills out128, or 1 and writes the problem (and its fix) into err.
//
// Rules checked: CUDA driver API cuTensorMapEncodeTiled (rank <= 5, 0 < box <= 256, 0 < elementStrides
// <= 8, globalStrides multiples of 16 and < 2^40, global address 16-B aligned, inner box bytes a
// multiple of 16 and <= the swizzle span); pelib.tma.TensorMapSpec.problems() is the Python twin.
#pragma once
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <string>

#include "model/error.h"

#define PE_SIM_TMAP_MAGIC 0x4D534550u  // "PESM" little endian
#define PE_SIM_TMAP_VERSION 1

struct alignas(64) PeSimTensorMap {
  uint32_t magic;
  uint8_t version;
  uint8_t rank;
  uint8_t elem_bytes;
  uint8_t dtype;
  uint64_t global_address;
  uint64_t dims[5];
  uint64_t strides[4];
  uint16_t box[5];
  uint8_t estrides[5];
  uint8_t swizzle;
  uint8_t interleave;
  uint8_t oob_fill;
  uint8_t l2_promotion;
  uint8_t reserved[21];
};
static_assert(sizeof(PeSimTensorMap) == 128, "PeSimTensorMap must fill the 128-byte CUtensorMap exactly");
static_assert(offsetof(PeSimTensorMap, global_address) == 8 && offsetof(PeSimTensorMap, dims) == 16 &&
                  offsetof(PeSimTensorMap, strides) == 56 && offsetof(PeSimTensorMap, box) == 88 &&
                  offsetof(PeSimTensorMap, estrides) == 98 && offsetof(PeSimTensorMap, swizzle) == 103 &&
                  offsetof(PeSimTensorMap, l2_promotion) == 106,
              "PeSimTensorMap layout differs from the documented one (pelib.sim.tensormap packs it)");

namespace pe_sim {

// Every cuTensorMapEncodeTiled rule the map breaks (CUDA driver API), empty when valid.
inline std::string tensormap_problems(const PeSimTensorMap& m) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (m.magic != PE_SIM_TMAP_MAGIC)
    return "not a simulator tensor map (magic word missing): encode it with pelib.sim.tensormap.encode "
           "(a driver-encoded CUtensorMap cannot be read by the simulator)";
  if (m.version != PE_SIM_TMAP_VERSION) return "tensor map version " + std::to_string(m.version) + " (expected 1)";
  if (m.rank < 1 || m.rank > 5) return "rank " + std::to_string(m.rank) + " is outside 1..5: reshape the tensor";
  if (m.elem_bytes != 1 && m.elem_bytes != 2 && m.elem_bytes != 4 && m.elem_bytes != 8)
    add("element size " + std::to_string(m.elem_bytes) + " B is not 1, 2, 4 or 8");
  if (m.swizzle != 0 && m.swizzle != 32 && m.swizzle != 64 && m.swizzle != 128)
    add("swizzle " + std::to_string(m.swizzle) + " is not 0, 32, 64 or 128 (bytes)");
  if (m.interleave != 0) add("interleaved tensor maps are not modelled: use interleave 0");
  if (m.oob_fill != 0) add("OOB fill NaN_REQUEST_ZERO_FMA is not modelled: use oob_fill 'zero'");
  if (m.global_address % 16) add("global address is not 16-byte aligned");
  for (int i = 0; i < m.rank; ++i) {
    if (m.dims[i] == 0 || m.dims[i] > (1ull << 32)) add("dims[" + std::to_string(i) + "] must be in 1..2^32");
    if (m.box[i] == 0 || m.box[i] > 256)
      add("box[" + std::to_string(i) + "] = " + std::to_string(m.box[i]) + " must be in 1..256: split the load");
    if (m.estrides[i] == 0 || m.estrides[i] > 8)
      add("element_strides[" + std::to_string(i) + "] must be in 1..8");
  }
  for (int i = 1; i < m.rank; ++i) {
    uint64_t s = m.strides[i - 1];
    if (s % 16 || s == 0 || s >= (1ull << 40))
      add("stride of dims[" + std::to_string(i) + "] is " + std::to_string(s) +
          " B: must be a multiple of 16 in 16..2^40-1 (pad the rows)");
  }
  unsigned inner = unsigned(m.box[0]) * m.elem_bytes;
  if (inner % 16) add("inner box is " + std::to_string(inner) + " B, not a multiple of 16");
  if (m.swizzle && inner > m.swizzle)
    add("inner box is " + std::to_string(inner) + " B but swizzle " + std::to_string(m.swizzle) +
        "B allows at most " + std::to_string(m.swizzle) + " B: narrow the box or widen the swizzle");
  return out;
}

// The tensor map behind a kernel's CUtensorMap argument (its 128 bytes), checked; throws ModelError.
inline const PeSimTensorMap& tensormap_from(const void* p) {
  if (!p) model_fail("tensor map pointer is null");
  if (reinterpret_cast<uintptr_t>(p) % 64)
    model_fail("tensor map at %p is not 64-byte aligned (CUtensorMap is alignas(64))", p);
  const auto& m = *static_cast<const PeSimTensorMap*>(p);
  std::string why = tensormap_problems(m);
  if (!why.empty()) model_fail("invalid tensor map: %s", why.c_str());
  return m;
}

// Fill `out` from cuTensorMapEncodeTiled's arguments (see the C ABI above); "" or the problem.
inline std::string encode_tensormap(PeSimTensorMap& out, int dtype_code, int elem_bytes, int rank,
                                    const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                                    const uint32_t* estrides, int swizzle, int interleave, int oob_fill,
                                    int l2_promotion, uint64_t global_address) {
  std::memset(&out, 0, sizeof out);
  if (rank < 1 || rank > 5) return "rank " + std::to_string(rank) + " is outside 1..5: reshape the tensor";
  if (dtype_code < 0 || dtype_code > 255) return "dtype code out of range";
  if (elem_bytes < 1 || elem_bytes > 8) return "element size out of range";
  if (swizzle < 0 || swizzle > 128 || interleave < 0 || interleave > 255 || oob_fill < 0 || oob_fill > 1)
    return "swizzle / interleave / oob_fill out of range";
  int l2 = l2_promotion == 0 ? 0 : l2_promotion == 64 ? 1 : l2_promotion == 128 ? 2 : l2_promotion == 256 ? 3 : -1;
  if (l2 < 0) return "l2_promotion " + std::to_string(l2_promotion) + " is not 0, 64, 128 or 256";
  out.magic = PE_SIM_TMAP_MAGIC;
  out.version = PE_SIM_TMAP_VERSION;
  out.rank = uint8_t(rank);
  out.elem_bytes = uint8_t(elem_bytes);
  out.dtype = uint8_t(dtype_code);
  out.global_address = global_address;
  for (int i = 0; i < rank; ++i) {
    out.dims[i] = dims[i];
    if (box[i] > 0xFFFF) return "box[" + std::to_string(i) + "] must be in 1..256";
    out.box[i] = uint16_t(box[i]);
    uint32_t e = estrides ? estrides[i] : 1;
    if (e > 255) return "element_strides[" + std::to_string(i) + "] must be in 1..8";
    out.estrides[i] = uint8_t(e);
  }
  for (int i = 0; i + 1 < rank; ++i) out.strides[i] = strides[i];
  out.swizzle = uint8_t(swizzle);
  out.interleave = uint8_t(interleave);
  out.oob_fill = uint8_t(oob_fill);
  out.l2_promotion = uint8_t(l2);
  std::string why = tensormap_problems(out);
  if (!why.empty()) std::memset(&out, 0, sizeof out);
  return why;
}

}  // namespace pe_sim
