// The name the stage signatures use for a tensor map parameter: CUtensorMap, as in the CUDA driver
// API and in most Blackwell GEMMs (gau-nernst learn-cuda 02e_matmul_sm100, CUTLASS TmaDescriptor).
// NVRTC has no cuda.h, so the type is the 128-byte, 64-B aligned opaque struct that common/tma.cuh
// declares as TensorMap; this header only gives it the driver's name (one type, two names).
#pragma once
#include "common/tma.cuh"

typedef TensorMap CUtensorMap;
static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 64,
              "CUtensorMap must be 128 bytes, 64-B aligned (CUDA driver API: cuTensorMapEncodeTiled)");
