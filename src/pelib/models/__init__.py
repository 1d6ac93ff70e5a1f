"""Models of the kernels: the pipeline equilibrium, the NVFP4 load/MMA overlap, the barrier protocols."""
