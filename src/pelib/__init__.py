"""pelib: the library behind the book. Build, inspect, launch, verify, time, model, plot.

The front door is pelib.stage.Stage (build, launch, verify, then time) with the modules at this level; each
instrument has its own package: pelib.sim (the CPU simulator's host side), pelib.predict (the timing model),
pelib.measure (the GPU runners), pelib.numerics, pelib.isa (SASS, the cubin, descriptors), pelib.layouts
(shared-memory layouts), pelib.kinds (what differs per family), pelib.models and pelib.views (what the
chapters draw).
"""
__version__ = "0.1.0"
