// Fixed-width names for kernels compiled by NVRTC, which ships no <cstdint>:
// the stages include no CUDA or C++ library headers at all, only these wrappers.
#pragma once
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;
#define PE_DEVICE __device__ __forceinline__
