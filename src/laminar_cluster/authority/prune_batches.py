"""The bounded delete batches of the leader authority's history prune (LA §4.8.2
step 3, LA §4.8.3 release-terminal GC, LA §4.8.4 grace; invariants LA-2 and LA-21).

Each batch is one LIST page (every listed path is checked to be canonical before anything of
the batch is deleted: a stray object fails the run closed, LA-11), then the deletes of at most
the batch budget, in a few concurrent lanes. A later batch continues after the last key the
previous one examined. Object ages compare the local wall clock with the store's
last_modified; a wall clock before 1970 fails closed (LA §11.7).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from laminar_cluster.clock import Clock
from laminar_cluster.codec.shape import reading
from laminar_cluster.errors import (
    InvalidArgument,
    ObjectNotFound,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.lease.limits import (
    LEADER_LEASE_MAX_PRUNE_BATCHES,
    LEADER_LEASE_PRUNE_BATCH_RECORDS,
    MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS,
    RECOVERY_RELEASE_GC_BATCH_RECORDS,
    RECOVERY_RELEASE_GC_MAX_BATCHES,
)
from laminar_cluster.lease.paths import (
    RECORDS_PREFIX,
    RELEASE_TERMINALS_PREFIX,
    parse_record_path,
    parse_release_terminal_path,
    release_terminal_path,
)
from laminar_cluster.lease.records import RecoveryReleaseTerminalRef
from laminar_cluster.lease.validate import validate_release_ref
from laminar_cluster.store import ObjectStore

# Entries one LIST page may return. A healthy namespace keeps at most this many records (the
# discovery bound covers the live chains plus one run's backlog), so one page is one LIST.
LIST_PAGE_ENTRIES: Final = MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS
# Deletes in flight at once (each lane deletes one object after another).
DELETE_LANES: Final = 8

T = TypeVar("T")


async def prune_records(
    store: ObjectStore, clock: Clock, head_seq: int, retained: frozenset[int], grace_ms: int
) -> tuple[tuple[int, ...], int]:
    """LA §4.8.2 step 3: at most LEADER_LEASE_MAX_PRUNE_BATCHES batches of at most
    LEADER_LEASE_PRUNE_BATCH_RECORDS records below the snapshot head `head_seq`, not in
    `retained`, at least `grace_ms` old. Returns (deleted sequences, batches used); raises
    StoreUnavailable when the budget ran out before the end of the history."""

    def keep(seq: int, key: str) -> bool:
        # LA-2: the snapshot head and anything above it (concurrent appends) are never
        # candidates, and neither is the head's predecessor or anything else retained.
        return seq >= head_seq or seq in retained

    deleted, exhausted, batches = await _delete_in_batches(
        store,
        clock,
        _Batching(RECORDS_PREFIX, parse_record_path, keep, grace_ms),
        budget=LEADER_LEASE_PRUNE_BATCH_RECORDS,
        batches_max=LEADER_LEASE_MAX_PRUNE_BATCHES,  # LA-21: a bounded delete budget
    )
    if exhausted:
        return tuple(seq for seq, _ in deleted), batches
    raise StoreUnavailable(
        f"{RECORDS_PREFIX}: leader lease history still exceeds the bounded prune budget "
        f"({LEADER_LEASE_MAX_PRUNE_BATCHES} batches of {LEADER_LEASE_PRUNE_BATCH_RECORDS}); "
        f"deleted {len(deleted)} records"
    )


async def prune_release_terminals(
    store: ObjectStore, clock: Clock, retained: RecoveryReleaseTerminalRef, grace_ms: int
) -> tuple[tuple[str, ...], int]:
    """LA §4.8.3: at most RECOVERY_RELEASE_GC_MAX_BATCHES batches of at most
    RECOVERY_RELEASE_GC_BATCH_RECORDS old release terminals, sparing the retained one and any
    with a greater generation (possibly staged for a future commit). Returns (deleted paths,
    batches used); running out of batches is not an error here."""
    with reading(RELEASE_TERMINALS_PREFIX):
        validate_release_ref(retained)
    generation = retained.release.generation
    retained_path = release_terminal_path(generation, retained.sha256)

    def keep(coordinates: tuple[int, str], key: str) -> bool:
        return key == retained_path or coordinates[0] > generation  # LA-16: later generations

    deleted, _, batches = await _delete_in_batches(
        store,
        clock,
        _Batching(RELEASE_TERMINALS_PREFIX, parse_release_terminal_path, keep, grace_ms),
        budget=RECOVERY_RELEASE_GC_BATCH_RECORDS,
        batches_max=RECOVERY_RELEASE_GC_MAX_BATCHES,  # LA-21
    )
    return tuple(key for _, key in deleted), batches


@dataclass(frozen=True, slots=True)
class _Batching(Generic[T]):
    """What one batched delete run lists and spares."""

    prefix: str
    parse: Callable[[str], T]  # a listed key to its coordinates (CorruptRecord if stray)
    keep: Callable[[T, str], bool]  # retained whatever its age
    grace_ms: int


async def _delete_in_batches(
    store: ObjectStore, clock: Clock, batching: _Batching[T], *, budget: int, batches_max: int
) -> tuple[list[tuple[T, str]], bool, int]:
    """At most `batches_max` batches of at most `budget` deletes, each after its own listing;
    (deleted, whether the listing was exhausted, batches used)."""
    deleted: list[tuple[T, str]] = []
    cursor: str | None = None
    for batch in range(1, batches_max + 1):
        listed = await _list_batch(store, clock, batching, cursor, budget=budget)
        await delete_all(store, [key for _, key in listed.candidates])
        deleted.extend(listed.candidates)
        if listed.exhausted:
            return deleted, True, batch
        cursor = listed.cursor
        await clock.sleep(0)  # cooperative yield between batches
    return deleted, False, batches_max


@dataclass(frozen=True, slots=True)
class _Listed(Generic[T]):
    candidates: list[tuple[T, str]]  # (parsed path, key), at most the batch budget
    exhausted: bool  # the listing reached the end of the prefix with budget to spare
    cursor: str | None  # where the next batch lists from


async def _list_batch(
    store: ObjectStore, clock: Clock, batching: _Batching[T], cursor: str | None, *, budget: int
) -> _Listed[T]:
    """One LIST page after `cursor`: every path parsed (LA-11: a stray or non-canonical path
    raises CorruptRecord before anything of the batch is deleted), then up to `budget` entries
    that are neither kept nor younger than the grace."""
    now_ms = wall_now_ms(clock)
    entries = await store.list(batching.prefix, offset=cursor, limit=LIST_PAGE_ENTRIES)
    parsed = [batching.parse(entry.key) for entry in entries]
    candidates: list[tuple[T, str]] = []
    for value, entry in zip(parsed, entries, strict=True):
        if batching.keep(value, entry.key) or now_ms - entry.last_modified_ms < batching.grace_ms:
            continue
        candidates.append((value, entry.key))
        if len(candidates) == budget:
            return _Listed(candidates, exhausted=False, cursor=entry.key)
    exhausted = len(entries) < LIST_PAGE_ENTRIES
    return _Listed(candidates, exhausted, entries[-1].key if entries else cursor)


def wall_now_ms(clock: Clock) -> int:
    """The local wall clock for object ages; before 1970 it fails closed (LA §4.8.4, LA §11.7)."""
    now_ms = clock.wall_ms()
    if now_ms < 0:
        raise InvalidArgument(
            f"local wall clock reads {now_ms} ms, before 1970: history prune refuses to judge "
            "object ages"
        )
    return now_ms


async def delete_all(store: ObjectStore, keys: Sequence[str]) -> None:
    """Delete `keys` in DELETE_LANES concurrent lanes; the first failure raises StoreUnavailable
    after every lane has stopped (a missing object is not a failure)."""
    lanes = [keys[lane::DELETE_LANES] for lane in range(DELETE_LANES)]
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_delete_lane(store, lane)) for lane in lanes if lane]
    for task in tasks:
        error = task.result()
        if error is not None:
            raise error


async def _delete_lane(store: ObjectStore, keys: Sequence[str]) -> StoreUnavailable | None:
    """Children return their error instead of raising (a failing TaskGroup child cancels its
    siblings mid-delete); CancelledError is never caught."""
    for key in keys:
        try:
            await store.delete(key)
        except ObjectNotFound:
            continue  # already gone: deleting is idempotent
        except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
            return StoreUnavailable(f"{key}: history prune delete failed: {error}")
    return None
