"""pelib: the library behind the book. Build, inspect, launch, verify, time, model, plot."""
__version__ = "0.1.0"
