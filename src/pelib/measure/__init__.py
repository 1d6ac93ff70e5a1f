"""The measurement runners and their shared command line (jobs): energy, hopper_perf, sweep, baselines,
the tensor-core and register probes, L2 policy, the variant catalog, the diff-size report, and the probe
kernels' host side (probe_kernels: the timing model's probe suite and the clock probe the runners borrow)."""
