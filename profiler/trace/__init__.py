"""The kernel side: libbpf.py (the ctypes bindings to libbpf), bpf.py (the loader, BpfObject),
core_btf.py (the cut of the kernel BTF objects relocate against) and kernel_flags.py, maps.py
(mirrors of bpf/fsprof.h), syscalls.py, symbols.py, hist.py."""
