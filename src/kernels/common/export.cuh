// PELIB_EXPORT(name, value): publish a compile-time constant of a stage in its cubin
// (an extern "C" __device__ global named pelib_<name>), so pelib reads the numbers the
// kernel was really compiled with (SMEM bytes, boxes, descriptors) instead of trusting prose.
//
// The vocabulary: every stage of every family (nvfp4/, fp8/, fp8/variants/, sm90/) exports all of
// these, with these meanings, so one host path can launch any stage from its exports alone.
//   smem_bytes         dynamic shared memory the launch must ask for (alignment slack included)
//   smem_limit         the per-block limit the stage was checked against: PE_SMEM_LIMIT (common/limits.cuh)
//   num_threads        threads per CTA (the kernel's __launch_bounds__)
//   cluster_x          CTAs per cluster along x (1 = no cluster)
//   cluster_in_kernel  1 if the kernel declares __cluster_dims__ (launch it without a cluster attribute)
//   grid_kind          0 = one CTA (or cluster) per output tile; 1 = persistent (grid = resident clusters,
//                      static schedule); 2 = persistent by column block (sm90 resident B: the grid is a
//                      multiple of N / tile_n)
//   tile_m, tile_n     output rows and columns one CTA writes per tile
//   block_k            K elements per pipeline stage
//   pipeline_stages    depth of the operand ring (the define is NUM_STAGES in every family)
//   epi_warps          warps that run the epilogue (sm90: consumer warpgroups x 4)
//   barrier_bytes      bytes of mbarriers (+ the TMEM address slot)
//   wait_kind          the mbarrier wait build compiled (common/mbarrier.cuh, PE_WAIT_KIND): 0 = bounded,
//                      printf on timeout (the default of the sm_100a stages); 1 = bounded, call-free trap
//                      (the sm90 twin's default); 2 = unbounded (what a production kernel ships)
//   tmap_<p>_box_rows, tmap_<p>_box_cols, tmap_<p>_swizzle   for each CUtensorMap kernel parameter
//                      tmap_<p>: the TMA box (rows = product of the outer box dimensions, cols = the
//                      innermost one, in elements of the map's data type: uint8 for FP8/FP4 operands
//                      and scale factors, bf16/fp16 for outputs) and the swizzle in bytes (0, 32, 64, 128);
//                      tmap_<p>_elem_bytes gives the element size the box is counted in.
// Family-specific exports (the emulator's a_desc, idesc, epi_cols_w*, staging_*, sf_*, b_perm, ...)
// come beside these.
#pragma once
#include "common/limits.cuh"

#define PELIB_EXPORT(name, value) \
  extern "C" __device__ const unsigned long long pelib_##name = (unsigned long long)(value)

// The four exports of one tensor-map parameter tmap_<p> (see the vocabulary above).
#define PELIB_EXPORT_TMAP(p, rows, cols, swizzle, elem_bytes) \
  PELIB_EXPORT(tmap_##p##_box_rows, rows);                    \
  PELIB_EXPORT(tmap_##p##_box_cols, cols);                    \
  PELIB_EXPORT(tmap_##p##_swizzle, swizzle);                  \
  PELIB_EXPORT(tmap_##p##_elem_bytes, elem_bytes)
