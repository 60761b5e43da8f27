"""Content-addressed blobs of the leader authority: create once, then read back (LA §2.6).

The catalog manifest (LA §4.7) and the recovery release terminals (LA §4.6.3) are stored at an
address derived from their canonical bytes. A create that finds the object present is fine, and
so is a create whose answer was lost: either way the stored object is read back through its
verifying loader and must equal the proposal exactly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from laminar_cluster.errors import (
    CorruptRecord,
    LaminarError,
    ObjectAlreadyExists,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, ObjectStore


async def create_and_read_back(
    store: ObjectStore,
    key: str,
    data: bytes,
    read_back: Callable[[], Awaitable[object]],
    proposal: object,
    *,
    what: str,
) -> None:
    """Create `data` at `key` (already there is fine), then `read_back()` (the verifying load)
    must give `proposal`: CorruptRecord when it differs, StoreUnavailable naming both failures
    when the create failed and the read back failed too, the read back's own error otherwise."""
    put_error: LaminarError | None = None
    try:
        await store.put(key, data, CREATE)
    except (ObjectAlreadyExists, PreconditionFailed):
        pass  # content-addressed: whatever is there is read back and compared below
    except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
        put_error = error  # settled by the read back, which may find our write applied
    try:
        stored = await read_back()
    except LaminarError as error:
        if put_error is None:
            raise
        raise StoreUnavailable(
            f"{key}: {what} write failed ({put_error}); reconciliation failed ({error})"
        ) from error
    if stored != proposal:
        raise CorruptRecord(f"{key}: {what} differs from the proposed content", key=key)
