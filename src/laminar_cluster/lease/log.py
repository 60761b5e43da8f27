"""The authority log: create-only records, the head pointer, and append (LA §1.3,
LA §1.4, LA §2, LA §4.1; invariants LA-1 to LA-3, LA-11, LA-21, LA-12).

Records `control/leader-lease/v{seq:016}.json` are written once with Create (LA-1). The pointer
`control/leader-lease-head/v1.json` is created once, then moved only by Update(e_tag/version) to
the exact successor, with a fresh random nonce in every body so no two publications share bytes
or an e_tag (LA-2, no ABA). A created record is committed the moment it exists: readers probe S+1
and repair the pointer (LA-3). Reads check the size from metadata before decoding, then decode
strictly, validate and require canonical bytes (LA-11). Ambiguous writes are settled by reading
back the exact key. Errors: spec `Io` -> StoreUnavailable; `Invalid`/`Json` about durable state
-> CorruptRecord naming the object; about the request -> InvalidArgument. Races are values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.clock import Clock
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectNotFound,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.lease.limits import (
    AUTHORITY_HEAD_VERSION,
    MAX_AUTHORITY_HEAD_BYTES,
    MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS,
    MAX_AUTHORITY_RECORD_BYTES,
    MAX_LEASE_HEAD_READ_ATTEMPTS,
)
from laminar_cluster.lease.outcomes import (
    AppendContended,
    AppendCreated,
    AppendExistingIdentical,
    AppendOutcome,
    PublishedHead,
    VersionedPointer,
)
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX, parse_record_path, record_path
from laminar_cluster.lease.records import AuthorityHeadPointer, LeaderAuthorityRecord
from laminar_cluster.lease.validate import (
    decode_pointer,
    decode_record,
    encode_pointer,
    encode_record,
)
from laminar_cluster.store import CREATE, GetResult, IfMatch, ObjectStore, PutMode
from laminar_cluster.store.record_cache import read_watched, record_cache

_log: Final = logging.getLogger(__name__)
_Record = LeaderAuthorityRecord | None

# Write errors after which the outcome must be settled by reading back (LA §4.1.3 step 4,
# LA §4.1.6 step 4): definite refusals, unsupported modes, lost responses, failed requests.
_WRITE_ERRORS: Final = (StoreError, StoreUnavailable, WriteOutcomeUnknown)


class HeadCache:
    """The head this process last published or read, as a hint for its next append.

    A stale hint is safe: the append's create at hint + 1 fails (the key exists) and the
    caller re-reads. It saves a lease renewal the three reads of the head (pointer, S, S+1).
    """

    def __init__(self) -> None:
        self._head: PublishedHead | None = None

    def get(self) -> PublishedHead | None:
        return self._head

    def set(self, head: PublishedHead | None) -> None:
        self._head = head

    def clear(self) -> None:
        self._head = None


def new_pointer(clock: Clock, sequence: int) -> AuthorityHeadPointer:
    """A pointer body for `sequence` with a fresh random nonce (LA §2.3; never reused)."""
    return AuthorityHeadPointer(
        version=AUTHORITY_HEAD_VERSION, sequence=sequence, nonce=str(clock.uuid4())
    )


async def read_record(store: ObjectStore, seq: int) -> LeaderAuthorityRecord | None:
    """Record `seq`, or None if absent (LA §4.1.1). Corrupt bytes raise CorruptRecord (LA-11).

    Records are create-only (LA-1), so a record this authority read and verified once is
    remembered (`store.record_cache`) and never read again; absence is never remembered."""
    key = record_path(seq)

    async def load() -> tuple[LeaderAuthorityRecord, int] | None:
        got = await _bounded_get(store, key, MAX_AUTHORITY_RECORD_BYTES, "leader authority record")
        if got is None:
            return None
        # LA-1, LA-11: strict decode, full validation, path seq == body seq, canonical bytes.
        return decode_record(got.body, key, seq), len(got.body)

    cache = record_cache(store)
    if cache is not None:
        return await cache.read_through(key, LeaderAuthorityRecord, load)
    loaded = await load()
    return None if loaded is None else loaded[0]


async def read_record_from(
    store: ObjectStore, head: LeaderAuthorityRecord, seq: int
) -> LeaderAuthorityRecord | None:
    """Record `seq` of the history below `head`: the head itself when it is that record (read
    once per walk), else `read_record`."""
    return head if seq == head.lease.seq else await read_record(store, seq)


async def read_pointer(store: ObjectStore) -> VersionedPointer | None:
    """The head pointer with its update version, or None if absent (LA §4.1.2).

    The pointer is watched (`store.record_cache.read_watched`): once this process read or
    wrote a version of it, the next read is a conditional GET that returns no body while the
    pointer is unchanged (a new nonce in every publication changes its e_tag, LA-2)."""
    read = await read_watched(
        store, HEAD_PATH, _decoded_pointer, VersionedPointer, max_bytes=MAX_AUTHORITY_HEAD_BYTES
    )
    return None if read is None else read[0]


def _decoded_pointer(got: GetResult) -> VersionedPointer:
    _check_size(got, HEAD_PATH, MAX_AUTHORITY_HEAD_BYTES, "leader authority head")
    pointer = decode_pointer(got.body, HEAD_PATH)
    return VersionedPointer(pointer=pointer, e_tag=got.meta.e_tag, version=got.meta.version)


async def _bounded_get(store: ObjectStore, key: str, max_bytes: int, what: str) -> GetResult | None:
    """GET at most max_bytes+1 bytes; None if absent. LA-11: the size from metadata is checked
    before the body is decoded."""
    try:
        got = await store.get(key, end=max_bytes + 1)
    except ObjectNotFound:
        return None
    _check_size(got, key, max_bytes, what)
    return got


def _check_size(got: GetResult, key: str, max_bytes: int, what: str) -> None:
    size = got.meta.size
    if not 1 <= size <= max_bytes:
        raise CorruptRecord(f"{key}: {what} is {size} bytes; expected 1..={max_bytes}", key=key)
    if not got.complete:
        raise CorruptRecord(f"{key}: read {len(got.body)} of {size} bytes (torn read)", key=key)


async def publish_pointer(
    store: ObjectStore, clock: Clock, target_seq: int, expected: VersionedPointer | None
) -> int:
    """Publish `target_seq` (Create when `expected` is None, else Update(expected) to exactly
    expected+1) and return the sequence the pointer durably names afterwards (LA §4.1.3).

    The result can be larger than `target_seq` when someone else published past it.
    """
    mode: PutMode = CREATE if expected is None else _update_mode(expected, target_seq)
    published, _ = await _publish_pointer(store, clock, target_seq, mode, expected)
    return published


def _update_mode(expected: VersionedPointer, target_seq: int) -> IfMatch:
    """The update-if-match that moves the pointer from `expected` to `target_seq`."""
    # LA-2: the pointer only ever moves to the exact successor of what was read.
    if expected.sequence + 1 != target_seq:
        raise InvalidArgument(
            f"{HEAD_PATH}: leader authority head update is not the exact successor "
            f"({expected.sequence} -> {target_seq})"
        )
    # LA-12: no native compare-and-swap token means no safe update.
    if expected.e_tag is None and expected.version is None:
        raise CorruptRecord(
            f"{HEAD_PATH}: leader authority store did not provide a native conditional "
            "update version",
            key=HEAD_PATH,
        )
    return IfMatch(e_tag=expected.e_tag, version=expected.version)


async def _publish_pointer(
    store: ObjectStore,
    clock: Clock,
    target_seq: int,
    mode: PutMode,
    expected: VersionedPointer | None,
) -> tuple[int, VersionedPointer | None]:
    """The published sequence, and the pointer we wrote with its new token when the store
    acknowledged the write with one (None after a reconciled or token-less write)."""
    written = new_pointer(clock, target_seq)
    try:
        result = await store.put(HEAD_PATH, encode_pointer(written), mode)
    except _WRITE_ERRORS as error:
        return await _reconcile_pointer(store, target_seq, expected, error), None
    cache = record_cache(store)
    if result.e_tag is None and result.version is None:
        if cache is not None:
            cache.forget(HEAD_PATH)
        return target_seq, None
    published = VersionedPointer(pointer=written, e_tag=result.e_tag, version=result.version)
    if cache is not None:
        cache.watch(HEAD_PATH, result.e_tag, published)  # our next read finds it unchanged
    return target_seq, published


async def _reconcile_pointer(
    store: ObjectStore, target_seq: int, expected: VersionedPointer | None, error: Exception
) -> int:
    """LA §4.1.3 step 4: settle a failed pointer write by reading the pointer back."""
    current = await read_pointer(store)
    if current is None:
        raise StoreUnavailable(
            f"{HEAD_PATH}: leader authority head write failed ({error}) and no pointer was durable"
        )
    if expected is not None and current.sequence < expected.sequence:
        raise CorruptRecord(  # LA-2
            f"{HEAD_PATH}: leader authority head regressed from sequence {expected.sequence} "
            f"to {current.sequence}",
            key=HEAD_PATH,
        )
    if current.sequence >= target_seq:
        if current.sequence > target_seq and await read_record(store, current.sequence) is None:
            raise CorruptRecord(
                f"{HEAD_PATH}: leader authority head points ahead to missing sequence "
                f"{current.sequence}",
                key=HEAD_PATH,
            )
        return current.sequence  # our write landed, or someone published past it
    raise StoreUnavailable(
        f"{HEAD_PATH}: leader authority head write failed ({error}) and remained at sequence "
        f"{current.sequence}"
    )


async def load_published_head(store: ObjectStore, clock: Clock) -> PublishedHead | None:
    """The published head after successor repair, or None for an empty namespace (LA §4.1.4).

    At most MAX_LEASE_HEAD_READ_ATTEMPTS attempts; the healthy path is one pointer GET and two
    concurrent record GETs, with no LIST and no PUT.
    """
    for attempt in range(MAX_LEASE_HEAD_READ_ATTEMPTS):
        if attempt:
            await clock.sleep(0)  # cooperative yield between attempts
        pointer = await read_pointer(store)
        if pointer is None:
            if await _bootstrap(store, clock):
                return None
            continue
        head = await _read_at_pointer(store, clock, pointer)
        if head is not None:
            return head
    raise StoreUnavailable(
        f"{HEAD_PATH}: leader authority head changed during {MAX_LEASE_HEAD_READ_ATTEMPTS} "
        "read attempts"
    )


async def _bootstrap(store: ObjectStore, clock: Clock) -> bool:
    """No pointer: discover and publish the latest record. True if the namespace is empty."""
    discovered = await discover_head(store)
    if discovered is None:
        # Empty unless a pointer appeared meanwhile (then the caller's next attempt reads it).
        return await read_pointer(store) is None
    await publish_pointer(store, clock, discovered.lease.seq, None)
    return False  # the result is always re-read through the pointer


async def discover_head(store: ObjectStore) -> LeaderAuthorityRecord | None:
    """The record with the largest sequence, found by one bounded LIST (LA §4.1.5; bootstrap and
    migration only, never on the healthy path)."""
    entries = await store.list(RECORDS_PREFIX, limit=MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS + 1)
    if len(entries) > MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS:  # LA-21
        raise CorruptRecord(
            f"{RECORDS_PREFIX}: leader authority head discovery exceeds the fixed "
            f"{MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS}-record bound",
            key=RECORDS_PREFIX,
        )
    # LA-11: a stray or non-canonical path under the prefix fails closed.
    sequences = [parse_record_path(entry.key) for entry in entries]
    if not sequences:
        return None
    sequence = max(sequences)
    record = await read_record(store, sequence)
    if record is None:
        raise StoreUnavailable(
            f"{record_path(sequence)}: discovered leader authority sequence {sequence} vanished "
            "before publication"
        )
    return record


async def _read_at_pointer(
    store: ObjectStore, clock: Clock, pointer: VersionedPointer
) -> PublishedHead | None:
    """One attempt at pointer S: the head, or None to try again after a repair or a move."""
    seq = pointer.sequence
    record, successor = await _read_target_and_successor(store, seq)
    if record is None:
        await _recheck_pointer(
            store,
            seq,
            while_=f"reading its target {seq}",
            stayed=f"points ahead to missing sequence {seq}",
        )
        return None  # the pointer moved past a pruned target
    if successor is None:
        return PublishedHead(record=record, pointer=pointer)
    # LA-3: a writer creates S+2 only after the pointer reached S+1, so S+2 with the pointer still
    # at S is corruption, not lag.
    if seq + 1 < U64_MAX and await read_record(store, seq + 2) is not None:
        await _recheck_pointer(
            store,
            seq,
            while_="checking pointer lag",
            stayed=f"at sequence {seq} lags by more than one record",
        )
        return None
    await publish_pointer(store, clock, seq + 1, pointer)  # repair a writer's lost publication
    return None


async def _read_target_and_successor(
    store: ObjectStore, seq: int
) -> tuple[LeaderAuthorityRecord | None, LeaderAuthorityRecord | None]:
    """Records S and S+1, read concurrently (S+1 skipped only where it would overflow)."""
    if seq == U64_MAX:
        return await read_record(store, seq), None
    # Children return errors instead of raising (3.11's TaskGroup leaks a cancellation count
    # when a child fails); S's error wins. CancelledError is never caught.
    async with asyncio.TaskGroup() as group:
        target = group.create_task(_settled(read_record(store, seq)))
        successor = group.create_task(_settled(read_record(store, seq + 1)))
    record, next_record = target.result(), successor.result()
    if isinstance(record, Exception):
        raise record
    if isinstance(next_record, Exception):
        raise next_record
    return record, next_record


async def _settled(read: Awaitable[_Record]) -> _Record | Exception:
    try:
        return await read
    except Exception as error:
        return error


async def _recheck_pointer(store: ObjectStore, seq: int, *, while_: str, stayed: str) -> None:
    """Re-read the pointer read at `seq`: return if it moved forward, else fail closed with
    `stayed` (it did not move), "regressed" (LA-2) or "disappeared"."""
    current = await read_pointer(store)
    if current is None:
        raise CorruptRecord(
            f"{HEAD_PATH}: leader authority head disappeared while {while_}", key=HEAD_PATH
        )
    if current.sequence < seq:
        raise CorruptRecord(
            f"{HEAD_PATH}: leader authority head regressed from sequence {seq} to "
            f"{current.sequence}",
            key=HEAD_PATH,
        )
    if current.sequence == seq:
        raise CorruptRecord(f"{HEAD_PATH}: leader authority head {stayed}", key=HEAD_PATH)


async def append(
    store: ObjectStore,
    clock: Clock,
    expected_head: PublishedHead | None,
    candidate: LeaderAuthorityRecord,
    *,
    on_appended: Callable[[], None] | None = None,
) -> AppendOutcome:
    """Append `candidate` right after `expected_head` (LA §4.1.6).

    `Contended` may be returned although our record is durable (someone published past it
    before our pointer update): callers re-derive their answer from the winner (LA §11.1).
    `on_appended` is where LA §4.1.6 schedules a prune.
    """
    body = encode_record(candidate)  # LA-11: validated and size-bounded before any write
    seq = candidate.lease.seq
    expected_pointer = _expected_pointer(expected_head, candidate)
    if isinstance(expected_pointer, AppendExistingIdentical | AppendContended):
        return expected_pointer  # settled without a write
    key = record_path(seq)
    try:
        await store.put(key, body, CREATE)  # LA-1: records are create-only
        created = True
        cache = record_cache(store)
        if cache is not None:
            cache.remember(key, candidate, len(body))  # validated by encode_record
    except _WRITE_ERRORS as error:
        # Read the exact key back: the create may have landed despite the error.
        durable = await read_record(store, seq)
        if durable is None:
            raise StoreUnavailable(
                f"{key}: authority record {seq} write failed ({error}) and no record was durable"
            ) from error
        if durable != candidate:
            return _contended(await _winner(store, clock))
        created = False  # ambiguous success: reported as ExistingIdentical, never Created
    mode: PutMode = CREATE
    if expected_pointer is not None:
        mode = _update_mode(expected_pointer, seq)
    published, pointer = await _publish_pointer(store, clock, seq, mode, expected_pointer)
    if published > seq:
        if created:
            schedule_prune(on_appended)
        return _contended(await _winner(store, clock))
    schedule_prune(on_appended)
    head = None if pointer is None else PublishedHead(record=candidate, pointer=pointer)
    if created:
        return AppendCreated(published=head)
    return AppendExistingIdentical(published=head)


def _expected_pointer(
    expected_head: PublishedHead | None, candidate: LeaderAuthorityRecord
) -> VersionedPointer | AppendExistingIdentical | AppendContended | None:
    """LA §4.1.6 step 2: the pointer to update, or the outcome when no write is needed."""
    seq = candidate.lease.seq
    if expected_head is None:
        if seq != 1:
            raise InvalidArgument(
                f"cannot append authority sequence {seq} to an empty published namespace"
            )
        return None
    head_seq = expected_head.record.lease.seq
    if head_seq == seq:
        if expected_head.record == candidate:
            return AppendExistingIdentical()
        return _contended(expected_head)
    if head_seq > seq:
        return _contended(expected_head)
    if head_seq + 1 != seq:
        raise InvalidArgument(
            f"cannot append authority sequence {seq} after published sequence {head_seq}"
        )
    return expected_head.pointer


async def _winner(store: ObjectStore, clock: Clock) -> PublishedHead:
    head = await load_published_head(store, clock)
    if head is None:
        raise StoreUnavailable(
            f"{HEAD_PATH}: authority contender was not published or readable (no head)"
        )
    return head


def _contended(winner: PublishedHead) -> AppendContended:
    return AppendContended(winner=winner.record, head=winner)


def require_advanced(winner: LeaderAuthorityRecord, base_seq: int, what: str) -> None:
    """A contended append is retried only if the winner moved the log past the head it was
    appended after; a winner at or below it means the store misbehaves (LA §6, LA §7)."""
    if winner.lease.seq <= base_seq:
        key = record_path(winner.lease.seq)
        raise CorruptRecord(
            f"{key}: {what} contention did not advance the authority sequence past {base_seq}",
            key=key,
        )


def schedule_prune(on_appended: Callable[[], None] | None) -> None:
    """Call the prune hook; a failing hook is logged, never fails the append (LA §4.8.1)."""
    if on_appended is None:
        return
    try:
        on_appended()
    except Exception:
        _log.exception("leader authority prune scheduling failed")
