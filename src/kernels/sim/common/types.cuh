// Simulated twin of common/types.cuh (the host build's include path puts src/kernels/sim first): the same
// fixed-width names, PE_DEVICE as a plain inline function, and the CUDA C++ built-ins a stage uses
// (runtime/api.h: threadIdx, __shared__, __syncthreads, ...), so the stage compiles with g++ / clang++.
#pragma once
#include "runtime/api.h"

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;
#define PE_DEVICE inline
