"""Checks a BPF object built for kernels before 5.11 (build/legacy/, FSPROF_LEGACY) for what 5.10's
verifier refuses in every program that holds it: atomic instructions other than a plain add (the
fetching ones and and/or/xor came in 5.12; clang turns `__sync_fetch_and_add(p, 0)` into an
atomic OR where it can see the 0) and helpers 5.10 lacks (ids above 155, bpf_task_storage_get and
on). Exit 1 with one line per finding. Run by the Makefile on each legacy object.

Usage: legacy_objects.py OBJECT.bpf.o
"""

import struct
import sys

BPF_STX = 0x03
BPF_ATOMIC = 0xC0
BPF_JMP = 0x05
BPF_CALL = 0x80
BPF_ADD = 0x00
LAST_HELPER_510 = 155  # __BPF_FUNC_MAX_ID - 1 in 5.10's uapi bpf.h


def sections(path):
    """{section name: bytes} of the object's executable sections (SHF_EXECINSTR), read from its
    ELF64 section headers."""
    data = open(path, "rb").read()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):
        name, kind, flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, kind, flags, offset, size

    strtab = header(shstrndx)
    found = {}
    for i in range(shnum):
        name, kind, flags, offset, size = header(i)
        if kind == 1 and flags & 0x4:  # SHT_PROGBITS, SHF_EXECINSTR
            end = data.index(b"\0", strtab[3] + name)
            found[data[strtab[3] + name : end].decode()] = data[offset : offset + size]
    return found


def findings(path):
    bad = []
    for name, code in sections(path).items():
        i = 0
        while i + 8 <= len(code):
            op, regs, _off, imm = struct.unpack_from("<BBhi", code, i)
            at, i = i // 8, i + (16 if op == 0x18 else 8)  # ld_imm64 takes two slots
            if op & 0x07 == BPF_STX and op & 0xE0 == BPF_ATOMIC and imm != BPF_ADD:
                bad.append(f"{path}: {name}+{at}: atomic op {imm:#x} (5.10 takes only a plain add)")
            if op == BPF_JMP | BPF_CALL and (regs >> 4) == 0 and imm > LAST_HELPER_510:
                bad.append(f"{path}: {name}+{at}: helper {imm} (5.10 has helpers up to {LAST_HELPER_510})")
    return bad


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    bad = findings(argv[1])
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
