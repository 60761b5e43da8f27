"""Canonical JSON for durable records: one byte string per value, checked on every read.

Two families (SC §2.4; reading them, SC §2.5):

* **Control records** (`encode` / `decode`): compact JSON, object keys in struct declaration
  order, every field present (`None` is `null`, never omitted). Byte for byte this is
  `json.dumps(ordered_dict, ensure_ascii=False, separators=(",", ":")).encode()`, which is also
  serde_json's compact output: non-ASCII, `/` and DEL raw; `"` and `\\` escaped; `\\b \\f \\n \\r
  \\t` short; other characters below 0x20 as lowercase `\\u00xx`. msgspec's encoder writes exactly
  this (tests check every character below 0x80 and arbitrary text against json.dumps), so no
  escaping is patched here. Dict-valued fields have their keys sorted (msgspec
  `order="deterministic"`), so a record holding a map still has one canonical body.
* **Capsules** (`encode_sorted` / `decode_sorted`): the same, but object keys sorted
  recursively by code point, struct fields included: `json.dumps(value, sort_keys=True, ...)`.
  msgspec's `order="sorted"` gives this directly (tests compare it with json.dumps and with
  `msgspec.json.encode(msgspec.to_builtins(x), order="sorted")`). The SHA-256 of these bytes is
  the capsule's content address.

Reading is, in this order: the size limit (before any parsing: an oversized body is never
parsed), the empty body, UTF-8 validity, a strict msgspec decode (`strict=True`: no floats for
ints, no `true` for an int or `1` for a bool, bounded ints, `Literal` versions, unknown fields
refused by `Record`'s `forbid_unknown_fields`, lone-surrogate escapes refused), the 64-bit
envelope of every integer (msgspec cannot bound a U64 above int64 itself), and last the
re-encode check: the decoded value must encode to exactly the bytes read. That last check is what
rejects everything msgspec itself accepts: whitespace, a trailing newline, reordered keys,
omitted `null`s, `\\u00e9` for `é`, `\\/`, `-0`, upper-case or unhyphenated UUIDs and duplicate
keys (msgspec keeps the last value of a duplicated key silently; a canonical body never repeats a
key, so the bytes cannot match).

Every reading failure is a `CorruptRecord` whose message starts with the object key and states
one fact. Writing goes through `encode_checked` / `encode_sorted_checked`, which check the size
limit and decode their own output strictly before any I/O (a U64 field holding -1 encodes
happily; it is refused there, as an `InvalidArgument`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec

from laminar_cluster.codec.types import (
    I64_MIN,
    U64_MAX,
    check_record_type,
    is_deeply_immutable,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument

T = TypeVar("T")

_CONTROL_ENCODER: Final = msgspec.json.Encoder(order="deterministic")
_SORTED_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_ENVELOPE_ENCODER: Final = msgspec.msgpack.Encoder()

# One strict decoder per record type (a bounded set: record types are module-level classes).
_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}
# Reading the same bytes as the same type gives the same value, and control records are read
# over and over (every poll re-reads heads, leases and the authority chain). For a type whose
# values are immutable all the way down, the value parsed from a body of at most
# _MEMO_BODY_BYTES_MAX bytes is kept for the next reader of identical bytes, in an LRU of
# _MEMO_ENTRIES_MAX entries (at most 16 MiB of bodies). A rejected body is never kept: it is
# parsed, and rejected, again.
_MEMO_BODY_BYTES_MAX: Final = 16 * 1024
_MEMO_ENTRIES_MAX: Final = 1024


class _Rejected(Exception):
    """Internal: the bytes are not the canonical encoding of a valid value; the text says why."""


def encode(record: msgspec.Struct) -> bytes:
    """The canonical control-record bytes of `record` (declaration order, nulls written)."""
    return _encode(record, _CONTROL_ENCODER.encode, what=type(record).__name__)


def encode_sorted(record: msgspec.Struct) -> bytes:
    """The canonical capsule bytes of `record` (keys sorted recursively by code point)."""
    return _encode(record, _SORTED_ENCODER.encode, what=type(record).__name__)


def encode_checked(record: msgspec.Struct, *, what: str, max_bytes: int) -> bytes:
    """`encode(record)`, validated for writing: size within `max_bytes`, and strictly decodable.

    Raises InvalidArgument naming `what` (the object about to be written) if the body is larger
    than `max_bytes`, or if a field holds a value its type refuses (out of range, wrong type).
    """
    return _encode_checked(record, what=what, max_bytes=max_bytes, sorted_keys=False)


def encode_sorted_checked(record: msgspec.Struct, *, what: str, max_bytes: int) -> bytes:
    """`encode_sorted(record)`, validated for writing as `encode_checked` does."""
    return _encode_checked(record, what=what, max_bytes=max_bytes, sorted_keys=True)


def decode(data: bytes, type_: type[T], *, key: str, max_bytes: int) -> T:
    """The control record of type `type_` whose canonical bytes are `data`.

    `key` names the object in every error. Raises CorruptRecord if `data` is larger than
    `max_bytes` (checked before parsing), empty, not UTF-8, not valid for `type_` under strict
    rules, or not byte-identical to the canonical encoding of what it decodes to.
    """
    return _decode(data, type_, key=key, max_bytes=max_bytes, sorted_keys=False)


def decode_sorted(data: bytes, type_: type[T], *, key: str, max_bytes: int) -> T:
    """The capsule of type `type_` whose canonical sorted-key bytes are `data` (as `decode`)."""
    return _decode(data, type_, key=key, max_bytes=max_bytes, sorted_keys=True)


def _encode(record: Any, encode_fn: Callable[[Any], bytes], *, what: str) -> bytes:
    check_record_type(type(record))
    try:
        return encode_fn(record)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as error:
        # UnicodeEncodeError (a lone surrogate in a str field) is a ValueError.
        raise InvalidArgument(f"{what}: record cannot be encoded: {error}") from error


def _encode_checked(
    record: msgspec.Struct, *, what: str, max_bytes: int, sorted_keys: bool
) -> bytes:
    _check_max_bytes(max_bytes, what)
    data = _encode(record, _encoder(sorted_keys), what=what)
    if len(data) > max_bytes:
        raise InvalidArgument(f"{what}: record is {len(data)} bytes; maximum is {max_bytes}")
    try:
        value = _parse(data, type(record), sorted_keys=sorted_keys)
    except _Rejected as error:
        raise InvalidArgument(f"{what}: {error}") from None
    if value != record:
        raise InvalidArgument(
            f"{what}: record does not survive a decode: a field holds a value of another type "
            "than declared (for example a list for a tuple or a str for a UUID)"
        )
    return data


def _decode(data: bytes, type_: type[T], *, key: str, max_bytes: int, sorted_keys: bool) -> T:
    _check_max_bytes(max_bytes, key)
    if not isinstance(data, bytes):
        raise InvalidArgument(f"{key}: record body must be bytes, not {type(data).__name__}")
    check_record_type(type_)
    if len(data) > max_bytes:
        raise CorruptRecord(f"{key}: record is {len(data)} bytes; maximum is {max_bytes}", key=key)
    if not data:
        raise CorruptRecord(f"{key}: record is empty", key=key)
    try:
        if len(data) <= _MEMO_BODY_BYTES_MAX and is_deeply_immutable(type_):
            value: T = _parse_memo(data, type_, sorted_keys)  # type: ignore[arg-type]
            return value
        return _parse(data, type_, sorted_keys=sorted_keys)
    except _Rejected as error:
        raise CorruptRecord(f"{key}: {error}", key=key) from None


@functools.lru_cache(maxsize=_MEMO_ENTRIES_MAX)
def _parse_memo(data: bytes, type_: type[Any], sorted_keys: bool) -> Any:
    """`_parse` for immutable record types, memoized (see _MEMO_BODY_BYTES_MAX)."""
    return _parse(data, type_, sorted_keys=sorted_keys)


def _parse(data: bytes, type_: type[T], *, sorted_keys: bool) -> T:
    """Strictly decode `data` and prove it canonical, or raise _Rejected with one fact."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Rejected(f"record is not valid UTF-8 at byte {error.start}") from None
    try:
        value: T = _decoder(type_).decode(data)
    except msgspec.ValidationError as error:
        raise _Rejected(f"record is not a valid {type_.__name__}: {error}") from None
    except msgspec.DecodeError as error:
        # A lone high-surrogate escape ("\ud800" then no low surrogate) is reported by msgspec
        # as "Input data was truncated"; a lone low surrogate as "invalid utf-16 surrogate pair".
        raise _Rejected(f"record is not valid JSON: {error}") from None
    except RecursionError:
        raise _Rejected("record nests deeper than the decoder's recursion limit") from None
    _check_int_envelope(value)
    try:
        canonical = _encode(value, _encoder(sorted_keys), what=type_.__name__)
    except InvalidArgument as error:  # not expected for a decoded value: still never trusted
        raise _Rejected(str(error)) from None
    if canonical != data:
        raise _Rejected(_canonical_difference(data, canonical, sorted_keys=sorted_keys))
    return value


def _canonical_difference(data: bytes, canonical: bytes, *, sorted_keys: bool) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(data, canonical, strict=False)) if a != b),
        min(len(data), len(canonical)),
    )
    form = "sorted-key canonical" if sorted_keys else "canonical"
    return (
        f"record body is not its {form} encoding: the {len(data)} bytes read differ from the "
        f"{len(canonical)} canonical bytes at byte {at}"
    )


def _check_int_envelope(value: object) -> None:
    """Raise _Rejected if `value` holds an int outside -2**63..2**64-1 (no Rust type holds it).

    msgspec cannot bound an int above int64 (see `codec.types`), so this is what caps a U64.
    msgpack has exactly this envelope and msgspec's msgpack encoder walks the whole value in C,
    raising OverflowError on the first int outside it: encoding is used here as that walk.
    """
    try:
        _ENVELOPE_ENCODER.encode(value)
    except OverflowError:
        raise _Rejected(
            f"record holds an integer outside the 64-bit range {I64_MIN}..{U64_MAX}"
        ) from None


def _encoder(sorted_keys: bool) -> Callable[[Any], bytes]:
    return _SORTED_ENCODER.encode if sorted_keys else _CONTROL_ENCODER.encode


def _decoder(type_: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _DECODERS.get(type_)
    if decoder is None:
        decoder = msgspec.json.Decoder(type_, strict=True)
        _DECODERS[type_] = decoder
    return decoder


def _check_max_bytes(max_bytes: int, what: str) -> None:
    if type(max_bytes) is not int or max_bytes < 1:
        raise InvalidArgument(f"{what}: max_bytes must be a positive int, not {max_bytes!r}")
