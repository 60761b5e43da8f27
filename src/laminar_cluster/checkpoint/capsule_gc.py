"""Recovery capsule garbage collection, one bounded step at a time
(CD §3.11, CD §4.11; invariant CD-11).

A step lists the whole capsule prefix, skips what sorts at or before the cursor, and processes
the 64 lexically smallest remaining locations (a bounded heap, so the choice does not depend on
the order the store lists in; the store API returns a listing as one list, so the listing itself
is held once per step, and the work per step is bounded by the batch), 4 at a time:

* a name that does not parse, or whose reference is invalid -> quarantined;
* an epoch at or above `before_epoch`, or a digest the caller knows is live -> retained;
* a capsule that loads and verifies -> deleted;
* a corrupt or foreign capsule -> quarantined (deleted if it vanished meanwhile);
* anything else (the store failed) -> left for a later pass.

Quarantine moves the bytes to `checkpoint-recovery-capsule-quarantine/path-sha256={sha256 of the
original path}`. The store has no rename, so it is a copy (create; an existing identical copy is
fine) followed by deleting the original; if it fails and the original is gone, it counts as
quarantined. Every step is idempotent and every failure is retried on a later pass.

The cursor `checkpoint-recovery-capsule-gc/deployment={uuid}/cursor` remembers the last location
examined; it is cleared (the pass wraps) once a step saw the end of the listing. It is advanced
by create or update-if-match; a lost race ends the step with `pending`. While a floor exists the
step always reports `pending`, so the caller keeps cycling and collects creates that became
visible late and earlier failures.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from laminar_cluster.checkpoint.capsule import load_recovery_capsule
from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.limits import (
    CAPSULE_GC_BATCH,
    CAPSULE_GC_CONCURRENCY,
    CAPSULE_GC_CURSOR_VERSION,
    MAX_CAPSULE_GC_CURSOR_BYTES,
    MAX_RECOVERY_CAPSULE_BYTES,
)
from laminar_cluster.checkpoint.paths import (
    CAPSULES_PREFIX,
    capsule_gc_cursor_path,
    parse_capsule_path,
    quarantine_path,
)
from laminar_cluster.checkpoint.reader import Loaded, read_bytes, read_record
from laminar_cluster.checkpoint.records import RecoveryCapsuleGcCursor, RecoveryCapsuleRef
from laminar_cluster.checkpoint.validate import validate_capsule_ref, validate_cursor
from laminar_cluster.codec import encode_checked
from laminar_cluster.codec.shape import ShapeViolation, reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    LaminarError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectMeta, PutMode

_log = logging.getLogger(__name__)

_CURSOR = "recovery capsule GC cursor"


@dataclass(frozen=True)
class RecoveryCapsuleGcStep:
    examined: int
    deleted: int
    quarantined: int
    pending: bool


class _Work(enum.Enum):
    RETAINED = "retained"
    DELETED = "deleted"
    QUARANTINED = "quarantined"
    FAILED = "failed"


async def sweep_recovery_capsules_step(
    ctx: DecisionContext, before_epoch: int, known_live_digests: frozenset[str]
) -> RecoveryCapsuleGcStep:
    """One bounded GC step over capsules below `before_epoch` (a durable cluster floor)."""
    if type(before_epoch) is not int or before_epoch < 0:
        raise InvalidArgument(f"capsule GC floor must be a non-negative int, not {before_epoch!r}")
    if before_epoch <= 1:
        return RecoveryCapsuleGcStep(examined=0, deleted=0, quarantined=0, pending=False)
    deployment_id = await load_or_create_deployment_id(ctx)
    observed = await _read_cursor(ctx, deployment_id)
    cursor = (
        observed.record
        if observed is not None
        else RecoveryCapsuleGcCursor(
            version=CAPSULE_GC_CURSOR_VERSION, deployment_id=deployment_id, offset=None
        )
    )
    batch, list_exhausted = await _select_batch(ctx, cursor.offset)
    work = await _process_batch(ctx, batch, before_epoch, known_live_digests)
    deleted = work.count(_Work.DELETED)
    quarantined = work.count(_Work.QUARANTINED)
    step = RecoveryCapsuleGcStep(
        examined=len(batch), deleted=deleted, quarantined=quarantined, pending=True
    )
    offset = None if list_exhausted else _next_offset(batch, cursor)
    updated = RecoveryCapsuleGcCursor(
        version=CAPSULE_GC_CURSOR_VERSION, deployment_id=deployment_id, offset=offset
    )
    token = observed.meta if observed is not None else None
    if updated != cursor:
        if not await _cas_cursor(ctx, updated, token):
            return step  # another sweeper moved the cursor: the caller cycles again
    elif token is None:
        await _cas_cursor(ctx, updated, None)  # create it anyway; a lost race is fine
    # While a floor exists, keep cycling: late creates and failures are collected next pass.
    return step


async def _select_batch(ctx: DecisionContext, offset: str | None) -> tuple[list[ObjectMeta], bool]:
    """The CAPSULE_GC_BATCH smallest locations after `offset`, ascending; and whether that is all.

    CD-11: the selection holds at most the batch (a bounded heap), and it does not depend on the
    order the store lists in. The store skips what sorts at or before `offset`; we check again.
    """
    listed = await ctx.store.list(CAPSULES_PREFIX, offset=offset)
    eligible = 0

    def after_offset() -> Iterator[ObjectMeta]:
        nonlocal eligible
        for meta in listed:
            if offset is None or meta.key > offset:  # string comparison, as the cursor orders
                eligible += 1
                yield meta

    batch = heapq.nsmallest(CAPSULE_GC_BATCH, after_offset(), key=lambda meta: meta.key)
    return batch, eligible <= CAPSULE_GC_BATCH


async def _process_batch(
    ctx: DecisionContext,
    batch: list[ObjectMeta],
    before_epoch: int,
    live: frozenset[str],
) -> list[_Work]:
    """Process every location of the batch, at most CAPSULE_GC_CONCURRENCY at once."""
    results = [_Work.FAILED] * len(batch)
    slots = asyncio.Semaphore(CAPSULE_GC_CONCURRENCY)

    async def one(index: int, meta: ObjectMeta) -> None:
        async with slots:
            results[index] = await _process_one(ctx, meta, before_epoch, live)

    async with asyncio.TaskGroup() as group:
        for index, meta in enumerate(batch):
            group.create_task(one(index, meta))
    return results


async def _process_one(
    ctx: DecisionContext, meta: ObjectMeta, before_epoch: int, live: frozenset[str]
) -> _Work:
    location = meta.key
    coordinates = parse_capsule_path(location)
    if coordinates is None:
        return await _quarantine(ctx, location, "its name is not a canonical capsule path")
    epoch, checkpoint_id, digest = coordinates
    if epoch >= before_epoch:
        return _Work.RETAINED
    ref = RecoveryCapsuleRef(epoch=epoch, checkpoint_id=checkpoint_id, sha256=digest, len=meta.size)
    try:
        validate_capsule_ref(ref)
    except ShapeViolation as violation:
        return await _quarantine(ctx, location, str(violation))
    if digest in live:
        return _Work.RETAINED
    try:
        await load_recovery_capsule(ctx, ref, fresh=True)  # what is stored now decides
    except CorruptRecord as corrupt:
        if await _is_gone(ctx, location):
            return _Work.DELETED  # someone else removed it
        return await _quarantine(ctx, location, str(corrupt))
    except LaminarError as error:
        _log.warning("%s: recovery capsule read failed; retried next pass: %s", location, error)
        return _Work.FAILED
    try:
        await ctx.store.delete(location)
    except LaminarError as error:
        _log.warning("%s: recovery capsule delete failed; retried next pass: %s", location, error)
        return _Work.FAILED
    return _Work.DELETED


async def _quarantine(ctx: DecisionContext, location: str, reason: str) -> _Work:
    """Move the object out of the capsule prefix: copy it, then delete the original."""
    target = quarantine_path(location)
    try:
        read = await read_bytes(
            ctx.store, location, what="quarantined object", max_bytes=MAX_RECOVERY_CAPSULE_BYTES
        )
        if read is not None:
            await _copy(ctx, target, read[0])
            await ctx.store.delete(location)
    except LaminarError as error:
        if await _is_gone(ctx, location):
            return _Work.QUARANTINED
        _log.warning("%s: quarantine failed; retried next pass: %s", location, error)
        return _Work.FAILED
    _log.warning("%s: quarantined to %s: %s", location, target, reason)
    return _Work.QUARANTINED


async def _copy(ctx: DecisionContext, target: str, body: bytes) -> None:
    """Create `target` with `body`; an identical copy already there is fine (a retried step)."""
    try:
        await ctx.store.put(target, body, CREATE)
        return
    except ObjectAlreadyExists:
        pass
    existing = await read_bytes(
        ctx.store, target, what="quarantined object", max_bytes=MAX_RECOVERY_CAPSULE_BYTES
    )
    if existing is None or existing[0] != body:
        # Another object once held this name: a rename replaces its target, so do we.
        await ctx.store.put(target, body, OVERWRITE)


async def _is_gone(ctx: DecisionContext, location: str) -> bool:
    try:
        await ctx.store.head(location)
    except ObjectNotFound:
        return True
    except LaminarError:
        return False
    return False


def _next_offset(batch: list[ObjectMeta], cursor: RecoveryCapsuleGcCursor) -> str | None:
    """The largest processed location that makes a valid cursor (any listed key can be long or
    odd); the old offset if none does, so a bad key never blocks the sweep."""
    for meta in reversed(batch):
        candidate = RecoveryCapsuleGcCursor(
            version=cursor.version, deployment_id=cursor.deployment_id, offset=meta.key
        )
        try:
            validate_cursor(candidate, cursor.deployment_id)
            encode_checked(candidate, what=_CURSOR, max_bytes=MAX_CAPSULE_GC_CURSOR_BYTES)
        except (ShapeViolation, InvalidArgument):
            continue
        return meta.key
    return cursor.offset


async def _read_cursor(
    ctx: DecisionContext, deployment_id: str
) -> Loaded[RecoveryCapsuleGcCursor] | None:
    path = capsule_gc_cursor_path(deployment_id)
    loaded = await read_record(
        ctx.store,
        path,
        RecoveryCapsuleGcCursor,
        what=_CURSOR,
        max_bytes=MAX_CAPSULE_GC_CURSOR_BYTES,
        require_token=True,  # CD-12: the cursor is advanced by update-if-match only
    )
    if loaded is not None:
        with reading(path):
            validate_cursor(loaded.record, deployment_id)
    return loaded


async def _cas_cursor(
    ctx: DecisionContext, cursor: RecoveryCapsuleGcCursor, expected: ObjectMeta | None
) -> bool:
    """Create or update-if-match the cursor: True if `cursor` is durable, False on a lost race."""
    path = capsule_gc_cursor_path(cursor.deployment_id)
    with writing(_CURSOR):
        validate_cursor(cursor, cursor.deployment_id)
    body = encode_checked(cursor, what=_CURSOR, max_bytes=MAX_CAPSULE_GC_CURSOR_BYTES)
    mode: PutMode = CREATE if expected is None else expected.token
    try:
        await ctx.store.put(path, body, mode)
    except (ObjectAlreadyExists, PreconditionFailed, ObjectNotFound):
        return False
    except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
        current = await _read_cursor(ctx, cursor.deployment_id)
        if current is not None and current.record == cursor:
            return True
        raise StoreUnavailable(
            f"{path}: {_CURSOR} write failed and was not applied as far as a read shows: {error}"
        ) from error
    return True
