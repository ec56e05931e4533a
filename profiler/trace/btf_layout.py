"""Checks a ctypes mirror against the C type it mirrors, field by field, from a BPF object's BTF.

A size check alone lets two swapped fields of one size through; this compares each member's name,
offset, size and signedness, recursing into structs and arrays. A byte array
(c_uint8/c_char * n) stands for an opaque value whose fields userspace never reads: its size only.
"""

import ctypes as c
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os

# BTF kinds (linux/btf.h)
_INT, _PTR, _ARRAY, _STRUCT, _UNION, _ENUM = 1, 2, 3, 4, 5, 6
_TYPEDEF, _VOLATILE, _CONST, _RESTRICT, _TYPE_TAG, _ENUM64 = 8, 9, 10, 11, 18, 19
_QUALIFIERS = {_TYPEDEF, _VOLATILE, _CONST, _RESTRICT, _TYPE_TAG}
_OPAQUE_BYTES = (c.c_uint8, c.c_char, c.c_byte)


class _Type(c.Structure):
    _fields_ = [("name_off", c.c_uint32), ("info", c.c_uint32), ("size_or_type", c.c_uint32)]


class _Member(c.Structure):
    _fields_ = [("name_off", c.c_uint32), ("type", c.c_uint32), ("offset", c.c_uint32)]


class _Array(c.Structure):
    _fields_ = [("type", c.c_uint32), ("index_type", c.c_uint32), ("nelems", c.c_uint32)]


def declare(lib: c.CDLL) -> None:
    """The BTF functions' signatures (the loader calls this with the other libbpf signatures)."""
    for name, res, args in (
        ("bpf_object__btf", c.c_void_p, [c.c_void_p]),
        ("bpf_map__btf_key_type_id", c.c_uint32, [c.c_void_p]),
        ("bpf_map__btf_value_type_id", c.c_uint32, [c.c_void_p]),
        ("btf__parse", c.c_void_p, [c.c_char_p, c.c_void_p]),
        ("btf__free", None, [c.c_void_p]),
        ("btf__find_by_name_kind", c.c_int32, [c.c_void_p, c.c_char_p, c.c_uint32]),
        ("btf__type_by_id", c.POINTER(_Type), [c.c_void_p, c.c_uint32]),
        ("btf__name_by_offset", c.c_char_p, [c.c_void_p, c.c_uint32]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


class Btf:
    """One BTF (a BPF object's, or a file's) read through libbpf."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    def _type(self, type_id):
        """(kind, vlen, kflag, name, size_or_type, address of what follows the header), qualifiers skipped."""
        while True:
            t = self.lib.btf__type_by_id(self.handle, type_id).contents
            kind = (t.info >> 24) & 0x1F
            if kind not in _QUALIFIERS:
                name = (self.lib.btf__name_by_offset(self.handle, t.name_off) or b"").decode()
                return kind, t.info & 0xFFFF, t.info >> 31, name, t.size_or_type, c.addressof(t) + c.sizeof(_Type)
            type_id = t.size_or_type

    def size(self, type_id: int) -> int:
        kind, vlen, _, _, size_or_type, extra = self._type(type_id)
        if kind == _ARRAY:
            arr = _Array.from_address(extra)
            return arr.nelems * self.size(arr.type)
        return 8 if kind == _PTR else size_or_type

    def mismatch(self, ctype: Any, type_id: int, where: str = "value") -> str | None:
        """A sentence naming the first difference between ctype and BTF type type_id, or None."""
        kind, vlen, kflag, name, size_or_type, extra = self._type(type_id)
        size = self.size(type_id)
        if c.sizeof(ctype) != size:
            return f"{where}: {c.sizeof(ctype)} bytes in Python, {size} in C ({name or 'unnamed type'})"
        if issubclass(ctype, c.Array) and ctype._type_ in _OPAQUE_BYTES:
            return None
        if kind in (_STRUCT, _UNION):
            if not issubclass(ctype, (c.Structure, c.Union)):
                return f"{where}: {ctype.__name__} mirrors struct {name}, which has fields"
            return self._fields_mismatch(ctype, vlen, kflag, extra, f"{where} (struct {name})")
        if kind == _ARRAY:
            arr = _Array.from_address(extra)
            if not issubclass(ctype, c.Array) or ctype._length_ != arr.nelems:
                return f"{where}: C has an array of {arr.nelems}, Python {ctype.__name__}"
            return self.mismatch(ctype._type_, arr.type, f"{where}[]")
        if issubclass(ctype, (c.Structure, c.Union, c.Array)):
            return f"{where}: Python {ctype.__name__} mirrors a C scalar"
        if kind == _INT and ctype not in (c.c_char, c.c_bool):
            signed = bool((c.c_uint32.from_address(extra).value >> 24) & 1)  # BTF_INT_SIGNED
            if signed != (ctype(-1).value < 0):
                return f"{where}: {'signed' if signed else 'unsigned'} in C, not in Python ({ctype.__name__})"
        return None

    def _fields_mismatch(self, ctype, vlen, kflag, extra, where):
        members = (_Member * vlen).from_address(extra)
        fields = ctype._fields_
        if len(fields) != vlen:
            return f"{where}: {vlen} fields in C, {len(fields)} in Python"
        for m, field in zip(members, fields):
            cname = (self.lib.btf__name_by_offset(self.handle, m.name_off) or b"").decode()
            name, ftype = field[0], field[1]
            at = f"{where}.{cname}"
            if name != cname:
                return f"{at}: Python has {name} there"
            bit_off = m.offset & 0xFFFFFF if kflag else m.offset
            if kflag and m.offset >> 24 or len(field) == 3:
                return f"{at}: a bitfield: mirror its whole storage unit instead"
            if bit_off != getattr(ctype, name).offset * 8:
                return f"{at}: at byte {bit_off / 8:g} in C, {getattr(ctype, name).offset} in Python"
            found = self.mismatch(ftype, m.type, at)
            if found:
                return found
        return None


def parse_file(lib: c.CDLL, path: "str | os.PathLike[str]") -> Btf | None:
    """The BTF of an ELF file (a .bpf.o), for checks without loading it; free with close()."""
    handle = lib.btf__parse(str(path).encode(), None)
    return Btf(lib, handle) if handle else None


def find_struct(btf: Btf, name: str) -> int | None:
    type_id = btf.lib.btf__find_by_name_kind(btf.handle, name.encode(), _STRUCT)
    return type_id if type_id > 0 else None


def close(btf: Btf) -> None:
    btf.lib.btf__free(btf.handle)
