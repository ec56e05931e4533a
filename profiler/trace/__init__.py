"""The kernel side: bpf.py (the only libbpf caller) and kernel_flags.py, maps.py (mirrors of
bpf/fsprof.h), syscalls.py, symbols.py, hist.py."""
