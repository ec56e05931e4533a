"""The ctypes mirrors are checked against the objects' own BTF field by field, not by size alone
(pure: reads build/*.bpf.o's BTF, loads nothing)."""

import ctypes as c

import pytest

from profiler.trace import btf_layout, maps
from profiler.trace.bpf import BUILD_DIR
from profiler.trace.libbpf import libbpf


@pytest.fixture(scope="module")
def btf():
    parsed = btf_layout.parse_file(libbpf(), BUILD_DIR / "syscalls.bpf.o")
    if parsed is None:
        pytest.skip("build/syscalls.bpf.o is not built (make build)")
    yield parsed
    btf_layout.close(parsed)


def check(btf, ctype, struct):
    return btf.mismatch(ctype, btf_layout.find_struct(btf, struct), "value")


def test_the_real_mirrors_match(btf):
    assert check(btf, maps.Hist, "hist") is None
    assert check(btf, maps.OpKey, "op_key") is None
    assert check(btf, maps.OffKey, "off_key") is None  # a struct inside a struct, a char array
    assert check(btf, maps.ExemplarSet, "exemplar_set") is None  # arrays of structs of structs
    assert check(btf, maps.WorkerWindow, "worker_window") is None
    assert check(btf, maps.WorkLast, "work_last") is None
    assert check(btf, maps.StackSampling, "stack_sampling") is None


def test_swapped_fields_of_one_size_are_found(btf):
    class Swapped(c.Structure):
        _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("nr", c.c_uint16)]

    assert check(btf, Swapped, "op_key") == "value (struct op_key).nr: Python has phase there"


def test_a_field_count_or_size_that_differs_is_found(btf):
    class Shifted(c.Structure):
        _pack_ = 1
        _fields_ = [("dev", c.c_uint16), ("nr", c.c_uint16), ("phase", c.c_uint16), ("pad", c.c_uint16)]

    # Same size, but the C struct has 3 fields: the count differs first.
    assert check(btf, Shifted, "op_key") == "value (struct op_key): 3 fields in C, 4 in Python"

    class Moved(c.Structure):
        _pack_ = 1
        _fields_ = [("dev", c.c_uint16), ("nr", c.c_uint32), ("phase", c.c_uint16)]

    assert check(btf, Moved, "op_key") == "value (struct op_key).dev: 2 bytes in Python, 4 in C (unsigned int)"


def test_signedness_and_array_length_are_checked(btf):
    fields = [(name, t) for name, t in maps.Hist._fields_]
    unsigned_slots = [("slots", c.c_int64 * maps.FINE_SLOTS) if n == "slots" else (n, t) for n, t in fields]
    SignedSlots = type("SignedSlots", (c.Structure,), {"_fields_": unsigned_slots})
    assert check(btf, SignedSlots, "hist") == "value (struct hist).slots[]: unsigned in C, not in Python (c_long)"

    half = maps.FINE_SLOTS // 2
    fewer = [(n, t) for n, t in fields if n != "slots"] + [("slots", c.c_uint64 * half), ("more", c.c_uint64 * half)]
    Split = type("Split", (c.Structure,), {"_fields_": fewer})
    assert check(btf, Split, "hist") == "value (struct hist): 5 fields in C, 6 in Python"


def test_an_opaque_byte_array_is_checked_by_size_only(btf):
    assert check(btf, c.c_uint8 * c.sizeof(maps.OpKey), "op_key") is None
    assert "bytes in Python" in check(btf, c.c_uint8 * 4, "op_key")
