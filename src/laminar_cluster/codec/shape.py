"""Record rules and where their violations go.

A record's rule raises `ShapeViolation` naming what is wrong. A reader turns it into
`CorruptRecord` naming the object (`reading(key)`): never trust it. A writer turns it into
`InvalidArgument` before any I/O (`writing(what)`): fix the input. `ShapeViolation` itself never
leaves those two blocks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError

_NIL: Final = "00000000-0000-0000-0000-000000000000"

# Strings already proven canonical UUIDs (the same boot ids and nonces are checked on every
# read): a bounded set, emptied when full.
_CANONICAL_UUIDS: set[str] = set()
_CANONICAL_UUIDS_MAX: Final = 4096


class ShapeViolation(LaminarError):
    """A record breaks one of its rules; the message says which (spec substrings kept)."""


@contextmanager
def reading(key: str) -> Iterator[None]:
    """Turn rule violations of a record read from `key` into CorruptRecord naming it."""
    try:
        yield
    except ShapeViolation as violation:
        raise CorruptRecord(f"{key}: {violation}", key=key) from None


@contextmanager
def writing(what: str) -> Iterator[None]:
    """Turn rule violations of a record about to be written into InvalidArgument."""
    try:
        yield
    except ShapeViolation as violation:
        raise InvalidArgument(f"{what}: {violation}") from None


def canonical_uuid(value: str, what: str) -> str:
    """`value` if it is a canonical (lowercase, hyphenated) non-nil UUID."""
    if type(value) is str and value in _CANONICAL_UUIDS:
        return value
    try:
        parsed = uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise ShapeViolation(f"{what} {value!r} is not a UUID") from None
    if str(parsed) != value or value == _NIL:
        raise ShapeViolation(f"{what} {value!r} must be a canonical non-nil UUID")
    if type(value) is str:
        if len(_CANONICAL_UUIDS) >= _CANONICAL_UUIDS_MAX:
            _CANONICAL_UUIDS.clear()
        _CANONICAL_UUIDS.add(value)
    return value
