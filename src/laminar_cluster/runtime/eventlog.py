"""The replayable partitioned event log in the object store (DC §3.1, DC §3.7).

Partition p belongs to vnode p % 256 (`partitions_of_vnode`). Each partition is a sequence of
create-only, contiguous `EventBatch` objects (`eventlog_batches`); an event's offset is its
position in its partition, from 0.

* `append` has one writer per partition. It finds the partition's end (its last batch, listed
  once and then remembered from its own appends) and creates the next batch there. A create that
  finds another batch at that offset means a second writer: `Contended`. An ambiguous create is
  settled by reading back (`put_resolved`); a retried create writes the same bytes, so it is
  idempotent.
* `append` then publishes the partition's new end (`eventlog_ends`: one small object per
  1,024 partitions, concurrent appends sharing one write), so consumers find new batches
  without listing.
* `read` finds the batch holding `offset` in the listing (`list(prefix, offset=...)` from the
  last batch known), gets it and slices; it fills `max_events` across consecutive batches.
  Caught up with what it listed, it lists again only when the published ends say the partition
  moved, once its reader has polled them (`poll_ends`; never polled, or a log without published
  ends: it lists as before). A gap
  or overlap between batches, a listed batch that is gone, a batch whose body or path is
  malformed, or an offset past the end are `CorruptRecord`: offsets come from the log, and
  batches are never deleted.

`PartitionCursor` is what one process knows of one partition: the first offsets of the batches
listed so far (a batch never moves, so a listing stays true) and the last batch decoded. Every
public operation runs under the caller's absolute deadline on the log's Clock; store reads are
retried on StoreUnavailable within it.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, RealClock, retry_until, within_deadline
from laminar_cluster.errors import (
    Contended,
    CorruptRecord,
    InvalidArgument,
    ObjectNotFound,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.runtime.eventlog_batches import (
    LAYOUT_PATH,
    EventBatch,
    check_partition,
    decode_batch,
    decode_layout,
    encode_batch,
    encode_layout,
    event_batch_path,
    parse_event_batch_path,
    partition_prefix,
    partitions_of_vnode,
)
from laminar_cluster.runtime.eventlog_ends import EndsPublisher, EndsView
from laminar_cluster.store import CREATE, ObjectStore, ReadBack, Resolution, put_resolved

__all__ = ["EventBatch", "EventLog", "PartitionCursor", "partitions_of_vnode"]

LIST_PAGE_KEYS: Final = 1_000
REFRESH_PAGES_MAX: Final = 100_000  # a partition of at most 10**8 batches

Events = tuple[tuple[int, ...], tuple[int, ...], int]  # keys, values, next offset


@dataclass(frozen=True, slots=True)
class _Batch:
    first: int
    keys: tuple[int, ...]
    values: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.first + len(self.keys)


class PartitionCursor:
    """One process's view of one partition: batch listing and the last batch decoded."""

    def __init__(
        self, store: ObjectStore, clock: Clock, partition: int, ends: EndsView | None = None
    ) -> None:
        self.store, self.clock, self.partition = store, clock, partition
        self.ends = ends  # the published ends, when the log's reader polls them
        self.prefix = partition_prefix(partition)
        self.firsts: list[int] = []  # first offsets of the listed batches, ascending, from 0
        self._cached: _Batch | None = None
        self._end_is_ours = False  # the cached batch is the last, and we created it
        self._append_lock = asyncio.Lock()

    async def refresh(self, *, deadline: float) -> int:
        """List the batches after the last one known; how many were new."""
        added = 0
        for _ in range(REFRESH_PAGES_MAX):
            after = event_batch_path(self.partition, self.firsts[-1]) if self.firsts else None
            metas = await retry_until(
                functools.partial(self.store.list, self.prefix, offset=after, limit=LIST_PAGE_KEYS),
                what=f"list {self.prefix}",
                clock=self.clock,
                deadline=deadline,
            )
            for meta in metas:
                partition, first = parse_event_batch_path(meta.key)
                if partition != self.partition:
                    raise CorruptRecord(f"{meta.key}: listed under {self.prefix}", key=meta.key)
                if self.firsts and first <= self.firsts[-1]:
                    continue  # a concurrent refresh or our own append knew it already
                if not self.firsts and first != 0:
                    raise CorruptRecord(
                        f"{meta.key}: the partition's first batch starts at offset {first}, not 0",
                        key=meta.key,
                    )
                self.firsts.append(first)
                added += 1
            if len(metas) < LIST_PAGE_KEYS:
                return added
        raise CorruptRecord(
            f"{self.prefix}: more than {REFRESH_PAGES_MAX * LIST_PAGE_KEYS} batches", key=None
        )

    async def batch(self, index: int, *, deadline: float) -> _Batch:
        """The listed batch `index`, checked to end where the next listed one starts."""
        first = self.firsts[index]
        path = event_batch_path(self.partition, first)
        cached = self._cached
        if cached is None or cached.first != first:
            body = await _get_or_none(self.store, path, clock=self.clock, deadline=deadline)
            if body is None:
                raise CorruptRecord(f"{path}: listed event batch is gone", key=path)
            decoded = decode_batch(path, body)
            cached = _Batch(first, decoded.keys, decoded.values)
            self._cached, self._end_is_ours = cached, False
        if index + 1 < len(self.firsts) and cached.end != self.firsts[index + 1]:
            following = self.firsts[index + 1]
            raise CorruptRecord(
                f"{path}: ends at offset {cached.end} but the next batch starts at {following}",
                key=path,
            )
        return cached

    async def end(self, *, deadline: float) -> int:
        """The offset after the partition's last event (0 when empty)."""
        await self.refresh(deadline=deadline)
        if not self.firsts:
            return 0
        return (await self.batch(len(self.firsts) - 1, deadline=deadline)).end

    async def read(self, offset: int, max_events: int, *, deadline: float) -> Events:
        """Up to `max_events` events from `offset`, and the offset after them."""
        if offset < 0 or max_events < 1:
            raise InvalidArgument(
                f"{self.prefix}: read at offset {offset} of {max_events} events; need offset "
                ">= 0 and at least 1 event"
            )
        key_parts: list[tuple[int, ...]] = []
        value_parts: list[tuple[int, ...]] = []
        position, remaining, refreshed = offset, max_events, False
        # Each pass takes at least one event, or gets the next batch, or refreshes (once), or
        # stops.
        for _ in range(2 * max_events + 2):
            index = bisect.bisect_right(self.firsts, position) - 1
            batch = None if index < 0 else await self.batch(index, deadline=deadline)
            if batch is None or position >= batch.end:
                known = 0 if batch is None else batch.end
                if position == known and await self._next_published(known, deadline=deadline):
                    continue
                if not refreshed and (self.ends is None or self.ends.lists(self.partition, known)):
                    refreshed = True
                    await self.refresh(deadline=deadline)
                    continue
                end = 0 if batch is None else batch.end
                if position > end:
                    raise CorruptRecord(
                        f"{self.prefix}: offset {position} is past the partition's end {end}",
                        key=self.prefix,
                    )
                break
            start = position - batch.first
            stop = min(len(batch.keys), start + remaining)
            key_parts.append(batch.keys[start:stop])
            value_parts.append(batch.values[start:stop])
            position, remaining = position + stop - start, remaining - (stop - start)
            if remaining == 0:
                break
        return _joined(key_parts), _joined(value_parts), position

    async def _next_published(self, end: int, *, deadline: float) -> bool:
        """Get the batch at `end`, the end of the last batch known, when the published ends say
        the partition moved past it: its key is known (a batch starts where the last ended),
        so one GET replaces a listing. False (list instead) without published ends or when
        the batch is not there."""
        published = None if self.ends is None else self.ends.published_end(self.partition)
        if published is None or published <= end or (self.firsts and end <= self.firsts[-1]):
            return False
        path = event_batch_path(self.partition, end)
        body = await _get_or_none(self.store, path, clock=self.clock, deadline=deadline)
        if body is None:
            return False
        decoded = decode_batch(path, body)
        self.firsts.append(end)
        self._cached, self._end_is_ours = _Batch(end, decoded.keys, decoded.values), False
        return True

    async def append(self, keys: Sequence[int], values: Sequence[int], *, deadline: float) -> int:
        """Create the next batch; its first offset. Contended if another writer got there."""
        async with self._append_lock:
            cached = self._cached
            if self._end_is_ours and cached is not None:
                first = cached.end
            else:
                first = await self.end(deadline=deadline)
            path = event_batch_path(self.partition, first)
            key_column, value_column = tuple(keys), tuple(values)
            body = encode_batch(self.partition, first, key_column, value_column)
            resolution = await retry_until(
                lambda: _create(self.store, path, body),
                what=f"create {path}",
                clock=self.clock,
                deadline=deadline,
            )
            if not resolution.ours:
                self._end_is_ours = False
                raise Contended(
                    f"{path}: another writer created this batch; partition {self.partition} "
                    "must have one writer"
                )
            if not self.firsts or first > self.firsts[-1]:
                self.firsts.append(first)
            self._cached = _Batch(first, key_column, value_column)
            self._end_is_ours = True
            return first


async def _create(store: ObjectStore, path: str, body: bytes) -> Resolution:
    resolution = await put_resolved(store, path, body, CREATE)
    if resolution.state is ReadBack.ABSENT:  # did not land: the same bytes may be sent again
        raise StoreUnavailable(f"{path}: create did not land")
    return resolution


def _joined(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    if len(parts) == 1:
        return parts[0]
    return tuple(itertools.chain.from_iterable(parts))


class EventLog:
    """The event log of one store. Deadlines are absolute `clock.monotonic()` values."""

    def __init__(self, store: ObjectStore, *, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock if clock is not None else RealClock()
        self._cursors: dict[int, PartitionCursor] = {}
        self.ends = EndsView(store)
        self._publisher = EndsPublisher(store, self.clock)

    def cursor(self, partition: int) -> PartitionCursor:
        """The (cached) cursor of `partition`."""
        found = self._cursors.get(partition)
        if found is None:
            check_partition(partition)
            found = self._cursors[partition] = PartitionCursor(
                self.store, self.clock, partition, self.ends
            )
        return found

    async def append(
        self, partition: int, keys: Sequence[int], values: Sequence[int], *, deadline: float
    ) -> int:
        """Append one batch to `partition` (one writer per partition); its first offset. It
        returns once the log's published ends cover the batch (`eventlog_ends`); a batch that
        is durable while its end could not be published is StoreUnavailable (a later
        publication, or the producer's next start, `publish_ends`, covers it)."""
        cursor = self.cursor(partition)
        async with within_deadline(self.clock, deadline, f"append to {cursor.prefix}"):
            first = await cursor.append(keys, values, deadline=deadline)
            await self._publisher.publish({partition: first + len(keys)}, deadline=deadline)
            return first

    async def publish_ends(self, ends: Mapping[int, int], *, deadline: float) -> None:
        """Make the published ends at least `ends` (partition -> end offset, as listed): a
        producer that starts again repairs what a predecessor could not publish."""
        await self._publisher.publish(
            {partition: end for partition, end in ends.items() if end > 0}, deadline=deadline
        )

    async def known_end(self, partition: int, *, deadline: float) -> int:
        """The partition's end as the last `poll_ends` read it (no request), else as listed
        (`end_offset`): good enough for a lag figure, never for where to append."""
        published = self.ends.published_end(partition)
        if published is not None:
            return published
        return await self.end_offset(partition, deadline=deadline)

    def caught_up(self, offsets: Mapping[int, int]) -> bool:
        """Whether the published ends last polled say every partition of `offsets` ends at or
        before its offset (a partition whose end was never polled, or has none: False). No
        request: a quiescence hint (DC-21), never where to read or append."""
        for partition, offset in offsets.items():
            published = self.ends.published_end(partition)
            if published is None or published > offset:
                return False
        return True

    async def poll_ends(self, partitions: Iterable[int], *, deadline: float) -> bool:
        """Read the published ends of `partitions` (a conditional GET per shard, normally one);
        whether they changed. From then on a read caught up with what it listed lists again
        only when the ends say the partition moved (`EndsView.lists`)."""
        async with within_deadline(self.clock, deadline, "poll event log ends"):
            return await retry_until(
                functools.partial(self.ends.poll, tuple(partitions)),
                what="poll event log ends",
                clock=self.clock,
                deadline=deadline,
            )

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> Events:
        """(keys, values, next_offset): up to `max_events` events of `partition` from `offset`
        (none at the end)."""
        cursor = self.cursor(partition)
        async with within_deadline(self.clock, deadline, f"read {cursor.prefix}"):
            return await cursor.read(offset, max_events, deadline=deadline)

    async def end_offset(self, partition: int, *, deadline: float) -> int:
        """The offset after the last event of `partition` (0 when it is empty)."""
        cursor = self.cursor(partition)
        async with within_deadline(self.clock, deadline, f"end of {cursor.prefix}"):
            return await cursor.end(deadline=deadline)

    async def declare_partitions(self, partitions: int, *, deadline: float) -> None:
        """Record the partition count once (`events/layout.json`); the same count again is a
        no-op, another count is Refused."""
        body = encode_layout(partitions)
        async with within_deadline(self.clock, deadline, f"create {LAYOUT_PATH}"):
            resolution = await retry_until(
                lambda: _create(self.store, LAYOUT_PATH, body),
                what=f"create {LAYOUT_PATH}",
                clock=self.clock,
                deadline=deadline,
            )
        if not resolution.ours:
            existing = await self.partitions(deadline=deadline)
            if existing != partitions:
                raise Refused(f"{LAYOUT_PATH}: the log has {existing} partitions, not {partitions}")
        # Every partition's end published (0 until appended): consumers of an empty log poll
        # the ends instead of listing each partition.
        await self._publisher.publish(dict.fromkeys(range(partitions), 0), deadline=deadline)

    async def partitions(self, *, deadline: float) -> int | None:
        """The declared partition count, or None if no producer declared one."""
        async with within_deadline(self.clock, deadline, f"read {LAYOUT_PATH}"):
            body = await _get_or_none(self.store, LAYOUT_PATH, clock=self.clock, deadline=deadline)
        return None if body is None else decode_layout(body)


async def _get_or_none(
    store: ObjectStore, path: str, *, clock: Clock, deadline: float
) -> bytes | None:
    """The body at `path`, None when there is no object; StoreUnavailable is retried until
    `deadline` (a read is always safe to repeat)."""
    try:
        result = await retry_until(
            lambda: store.get(path), what=f"get {path}", clock=clock, deadline=deadline
        )
    except ObjectNotFound:
        return None
    return result.body
