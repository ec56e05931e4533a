"""fsprof: a kernel-tracing filesystem profiler."""

__version__ = "0.1.0"
