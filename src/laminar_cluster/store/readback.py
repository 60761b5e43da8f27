"""Settling ambiguous writes by reading the object back.

A conditional write can end three ways that the writer cannot tell apart from the error alone:
applied with the response lost (`WriteOutcomeUnknown`), applied and then reported as a conflict
by a client-side retry (obstore's `AlreadyExistsError`/`PreconditionError`), or refused without
being applied (S3's 409 on create, a real conflict). Reading the object back settles it, provided
the body is unique to this write attempt: bodies that callers write conditionally carry a nonce
and an increasing sequence (S3 e_tags are content hashes, so identical bytes would allow ABA).

`FOREIGN` means the current object is not this attempt's bytes. The attempt may still have
landed and been superseded since; callers whose bodies carry an increasing sequence tell these
apart from the sequence they read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from laminar_cluster.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store.api import GetResult, ObjectStore, PutMode, PutResult


class ReadBack(enum.Enum):
    OURS = "ours"  # the object holds exactly this attempt's bytes
    FOREIGN = "foreign"  # the object holds other bytes
    ABSENT = "absent"  # there is no object


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a write attempt amounted to, and the object as read back (if it was)."""

    state: ReadBack
    current: GetResult | None  # None when ABSENT, or when the put answered without doubt
    put_result: PutResult | None = None  # set when the store acknowledged the write

    @property
    def ours(self) -> bool:
        return self.state is ReadBack.OURS


async def read_back(store: ObjectStore, key: str, body: bytes) -> Resolution:
    """Read `key` (at most len(body)+1 bytes) and compare it with `body`.

    A failed read raises WriteOutcomeUnknown: the write it was to settle is still unsettled.
    """
    try:
        current = await store.get(key, end=len(body) + 1)
    except ObjectNotFound:
        return Resolution(ReadBack.ABSENT, None)
    except StoreUnavailable as error:
        raise WriteOutcomeUnknown(f"{key}: read-back failed: {error}", key=key) from error
    if current.complete and current.body == body:
        return Resolution(ReadBack.OURS, current)
    return Resolution(ReadBack.FOREIGN, current)


async def put_resolved(store: ObjectStore, key: str, body: bytes, mode: PutMode) -> Resolution:
    """Put, and settle every ambiguous answer by reading back.

    Returns OURS with `put_result` when the store acknowledged the write; OURS from a read-back
    when the write landed despite an error; FOREIGN or ABSENT (with the object as read) when it
    did not land, or cannot be shown to have. StoreUnavailable (nothing applied) propagates, and
    so does WriteOutcomeUnknown when even the read-back fails.
    """
    try:
        result = await store.put(key, body, mode)
    except (ObjectAlreadyExists, PreconditionFailed, WriteOutcomeUnknown):
        return await read_back(store, key, body)
    except ObjectNotFound:
        return Resolution(ReadBack.ABSENT, None)
    return Resolution(ReadBack.OURS, None, put_result=result)
