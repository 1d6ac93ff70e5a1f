// Hardware limits the stages check themselves against, each written once.
//
// PE_SMEM_LIMIT: the most shared memory one thread block may use on sm_90 and sm_100, after the
// kernel opts in with cudaFuncSetAttribute(MaxDynamicSharedMemorySize): 227 KB = 232,448 B (CUDA C++
// Programming Guide, "Technical Specifications per Compute Capability": maximum amount of shared
// memory per thread block, 227 KB for compute capability 9.0 and 10.0; CUTLASS
// include/cutlass/arch/arch.h sm100_smem_capacity_bytes = 232448). The SM has 228 KB; 1 KB per block
// is reserved for the system. Static plus dynamic shared memory of a CTA must fit it.
#pragma once

#define PE_SMEM_LIMIT (227 * 1024)
