"""Key to vnode: `xxh3_64(canonical key bytes) % vnode_count` (256 per deployment).

The canonical key encoding (ours; LaminarDB hashes Arrow's row format, which a Python port cannot
reproduce) is a type tag followed by the value, so keys of different types never collide by
encoding and a tuple's encoding is unambiguous:

| value | bytes |
| --- | --- |
| `bytes` | `b"b"` + u32 little-endian length + the bytes |
| `str` | `b"s"` + u32 little-endian length + UTF-8 bytes |
| `int` (signed, < 2**63 in magnitude) | `b"i"` + i64 little-endian |
| `tuple` | `b"t"` + u32 little-endian count + each element's encoding |

`bool` is refused (it is an `int` in Python, and `True == 1` would silently collide); so are
floats, None, and ints outside i64.
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

import xxhash

from laminar_cluster.errors import InvalidArgument

VNODE_COUNT: Final = 256
MAX_VNODE_COUNT: Final = 65_535

Key: TypeAlias = "str | bytes | int | tuple[Key, ...]"

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def encode_key(key: Key) -> bytes:
    """The canonical byte encoding of a key (see the module docstring)."""
    parts: list[bytes] = []
    _encode(key, parts, depth=0)
    return b"".join(parts)


def _encode(key: Key, parts: list[bytes], *, depth: int) -> None:
    if depth > 32:
        raise InvalidArgument("key nests tuples more than 32 deep")
    if isinstance(key, bool):
        raise InvalidArgument("bool is not a key type (True would equal 1); use an int or str")
    if isinstance(key, bytes):
        parts += [b"b", struct.pack("<I", len(key)), key]
    elif isinstance(key, str):
        data = key.encode("utf-8")
        parts += [b"s", struct.pack("<I", len(data)), data]
    elif isinstance(key, int):
        if not _I64_MIN <= key <= _I64_MAX:
            raise InvalidArgument(f"int key {key} is outside the signed 64-bit range")
        parts += [b"i", struct.pack("<q", key)]
    elif isinstance(key, tuple):
        parts += [b"t", struct.pack("<I", len(key))]
        for element in key:
            _encode(element, parts, depth=depth + 1)
    else:
        raise InvalidArgument(f"{type(key).__name__} is not a key type (str, bytes, int, tuple)")


def vnode_for_bytes(data: bytes, vnode_count: int = VNODE_COUNT) -> int:
    """The vnode of already-encoded key bytes."""
    _check_vnode_count(vnode_count)
    return int(xxhash.xxh3_64_intdigest(data)) % vnode_count


def vnode_for_key(key: Key, vnode_count: int = VNODE_COUNT) -> int:
    """The vnode that owns `key`: xxh3_64 of its canonical encoding modulo `vnode_count`."""
    return vnode_for_bytes(encode_key(key), vnode_count)


def vnode_for_partition(partition: int, vnode_count: int = VNODE_COUNT) -> int:
    """Source partition p belongs to vnode p % vnode_count."""
    if partition < 0:
        raise InvalidArgument(f"partition {partition} is negative")
    _check_vnode_count(vnode_count)
    return partition % vnode_count


def _check_vnode_count(vnode_count: int) -> None:
    if not 1 <= vnode_count <= MAX_VNODE_COUNT:
        raise InvalidArgument(f"vnode count {vnode_count} is outside 1..={MAX_VNODE_COUNT}")
