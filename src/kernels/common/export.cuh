// PELIB_EXPORT(name, value): publish a compile-time constant of a stage in its cubin
// (an extern "C" __device__ global named pelib_<name>), so pelib reads the numbers the
// kernel was really compiled with (SMEM bytes, boxes, descriptors) instead of trusting prose.
#pragma once
#define PELIB_EXPORT(name, value) \
  extern "C" __device__ const unsigned long long pelib_##name = (unsigned long long)(value)
