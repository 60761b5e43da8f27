"""The bounded control-record read every record read goes through (CD §2.5).

1. GET at most `max_bytes + 1` bytes: an unbounded body is never requested.
2. An advertised size over the maximum is refused ("maximum is") before any parsing.
3. The bytes served must be exactly the advertised size ("inconsistent with advertised size").
4. Mutable records in NativeCas mode must carry an e_tag or a version ("neither an ETag nor an
   object version for CAS").
5. Strict, canonical decode (`codec.decode`), then the caller's rules (`validate`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
import msgspec.inspect as mi

from laminar_cluster.codec import decode, decode_sorted
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.store import ObjectMeta, ObjectStore

T = TypeVar("T")


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """A record as read, with the metadata (and so the CAS token) of the version read."""

    record: T
    meta: ObjectMeta


async def read_bytes(
    store: ObjectStore, key: str, *, what: str, max_bytes: int
) -> tuple[bytes, ObjectMeta] | None:
    """The whole body of `key` (at most `max_bytes`), or None if absent."""
    try:
        got = await store.get(key, end=max_bytes + 1)
    except ObjectNotFound:
        return None
    size = got.meta.size
    if size > max_bytes:
        raise CorruptRecord(f"{key}: {what} is {size} bytes; maximum is {max_bytes}", key=key)
    if len(got.body) != size:
        raise CorruptRecord(
            f"{key}: {what} returned {len(got.body)} bytes, inconsistent with advertised size "
            f"{size}",
            key=key,
        )
    return got.body, got.meta


async def read_content_addressed(
    store: ObjectStore, key: str, *, what: str, expected_len: int
) -> bytes:
    """The exact bytes of a content-addressed object of known length. Missing, or any other
    length (advertised or served), is CorruptRecord naming the object; the caller then checks
    the digest and the canonical encoding."""
    try:
        got = await store.get(key, end=expected_len + 1)
    except ObjectNotFound:
        raise CorruptRecord(f"{key}: {what} is missing", key=key) from None
    if got.meta.size != expected_len:
        raise CorruptRecord(
            f"{key}: {what} is {got.meta.size} bytes, expected {expected_len}", key=key
        )
    if len(got.body) != expected_len:
        raise CorruptRecord(f"{key}: {what} payload length changed while reading", key=key)
    return got.body


async def read_record(
    store: ObjectStore,
    key: str,
    type_: type[T],
    *,
    what: str,
    max_bytes: int,
    require_token: bool,
    sorted_keys: bool = False,
) -> Loaded[T] | None:
    """Read and strictly decode one record, or None if absent."""
    read = await read_bytes(store, key, what=what, max_bytes=max_bytes)
    if read is None:
        return None
    body, meta = read
    if require_token and meta.e_tag is None and meta.version is None:
        raise CorruptRecord(
            f"{key}: {what} has neither an ETag nor an object version for CAS", key=key
        )
    _check_version(body, type_, key=key, what=what)
    decoder = decode_sorted if sorted_keys else decode
    return Loaded(decoder(body, type_, key=key, max_bytes=max_bytes), meta)


class _VersionOnly(msgspec.Struct):
    version: Any = None


def _check_version(body: bytes, type_: object, *, key: str, what: str) -> None:
    """Name an unsupported version plainly ("version 1 is unsupported (expected 2)")."""
    expected = _expected_version(type_)
    try:
        found = msgspec.json.decode(body, type=_VersionOnly).version
    except msgspec.DecodeError:
        return  # not even JSON of an object: the strict decode reports it
    if type(found) is int and found != expected:
        raise CorruptRecord(
            f"{key}: {what} version {found} is unsupported (expected {expected})", key=key
        )


def _expected_version(type_: object) -> int | None:
    return _expected_version_cached(type_)


@functools.cache
def _expected_version_cached(type_: object) -> int | None:
    info = mi.type_info(type_)
    if isinstance(info, mi.StructType) and info.fields and info.fields[0].name == "version":
        literal = info.fields[0].type
        if isinstance(literal, mi.LiteralType) and len(literal.values) == 1:
            value = literal.values[0]
            return value if isinstance(value, int) else None
    return None
