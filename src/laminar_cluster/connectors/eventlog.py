"""The replayable partitioned event log in the object store (DC §3.1, DC §3.7).

Partition p belongs to vnode p % 256 (`partitions_of_vnode`); an event's offset is its position
in its partition, from 0. The log is a sequence of create-only segments, each holding one batch
of each of some partitions (`eventlog_segments`), and an index of every partition's end and
last segment (`eventlog_ends`):

* `append_batches` writes one segment for batches of many partitions (one producer flush is
  one object); `append` is the one-partition case. One writer per partition: a second one is
  `Contended` (`eventlog_writer`). It returns once the index covers the segment.
* A log is of one kind, which its layout record says: int columns (`declare_partitions`,
  `append_batches`, `read`) or records, users' JSON objects by key (`declare_records`,
  `append_records`, `read_records`; `eventlog_records`). Appending or reading the other kind
  is InvalidArgument saying what to use.
* `read` links the partition's batches back from the index and slices them; a process reads
  each segment once (`eventlog_reader`). A consumer that polls the index itself (`poll_ends`,
  a conditional GET per 1,024 partitions) reads nothing while nothing moved.

Every public operation runs under the caller's absolute deadline on the log's Clock; store
reads are retried on StoreUnavailable within it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from laminar_cluster.assignment.vnode import Key
from laminar_cluster.clock import Clock, RealClock, retry_until, within_deadline
from laminar_cluster.connectors.eventlog_ends import EndsView
from laminar_cluster.connectors.eventlog_reader import (
    Events,
    PartitionCursor,
    SegmentReader,
    get_or_none,
)
from laminar_cluster.connectors.eventlog_records import (
    RECORD_PARTITIONS_DEFAULT,
    check_records,
    key_hash,
)
from laminar_cluster.connectors.eventlog_segments import (
    LAYOUT_PATH,
    LogKind,
    LogLayout,
    check_partition,
    decode_layout,
    encode_layout,
    partitions_of_vnode,
)
from laminar_cluster.connectors.eventlog_writer import SegmentWriter, create_settled
from laminar_cluster.errors import InvalidArgument, Refused
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.record_cache import caching

__all__ = ["EventLog", "PartitionCursor", "partitions_of_vnode"]


class EventLog:
    """The event log of one store. Deadlines are absolute `clock.monotonic()` values."""

    def __init__(self, store: ObjectStore, *, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock if clock is not None else RealClock()
        self._cursors: dict[int, PartitionCursor] = {}
        self.ends = EndsView(store)
        self._segments = SegmentReader(store, self.clock)
        self._writer = SegmentWriter(caching(store), self._segments, self.clock)
        self._layout: LogLayout | None = None  # once read, for good (create-only)
        self._undeclared = False  # an int append found no layout (an undeclared int log)

    def cursor(self, partition: int) -> PartitionCursor:
        """The (cached) cursor of `partition`."""
        found = self._cursors.get(partition)
        if found is None:
            check_partition(partition)
            found = self._cursors[partition] = PartitionCursor(
                self._segments, self.ends, partition, self.clock
            )
        return found

    async def append(
        self, partition: int, keys: Sequence[int], values: Sequence[int], *, deadline: float
    ) -> int:
        """Append one batch to `partition` (a segment of its own); its first offset."""
        firsts = await self.append_batches({partition: (keys, values)}, deadline=deadline)
        return firsts[partition]

    async def append_batches(
        self, batches: Mapping[int, tuple[Sequence[int], Sequence[int]]], *, deadline: float
    ) -> dict[int, int]:
        """Append one batch to each partition of `batches` (partition -> (keys, values)) as
        one segment; each partition's first offset. It returns once the index covers the
        segment; a segment that is durable while its index could not be published is
        StoreUnavailable (the next append or start publishes it)."""
        async with within_deadline(self.clock, deadline, "append to the event log"):
            await self._require_kind("ints", deadline)
            return await self._writer.append(
                {p: (tuple(keys), tuple(values)) for p, (keys, values) in batches.items()},
                deadline=deadline,
            )

    async def recover(self, partitions: Iterable[int], *, deadline: float) -> dict[int, int]:
        """A producer's start: the ends of `partitions`, with whatever a dead producer left
        unpublished found and published."""
        async with within_deadline(self.clock, deadline, "recover the event log's ends"):
            return await self._writer.recover(partitions, deadline=deadline)

    async def known_end(self, partition: int, *, deadline: float) -> int:
        """The partition's end as the last `poll_ends` read it (no request), else as the index
        says now (`end_offset`): good enough for a lag figure."""
        published = self.ends.published_end(partition)
        if published is not None:
            return published
        return await self.end_offset(partition, deadline=deadline)

    def caught_up(self, offsets: Mapping[int, int]) -> bool:
        """Whether the index last polled says every partition of `offsets` ends at or before
        its offset (a partition whose end was never polled, or has none: False). No request:
        a quiescence hint (DC-21), never where to read or append."""
        for partition, offset in offsets.items():
            published = self.ends.published_end(partition)
            if published is None or published > offset:
                return False
        return True

    async def poll_ends(self, partitions: Iterable[int], *, deadline: float) -> bool:
        """Read the index of `partitions` (a conditional GET per shard, normally one); whether
        it changed. From then on reads trust what the polls say (`EndsView.polled`)."""
        self.ends.polled = True
        async with within_deadline(self.clock, deadline, "poll event log ends"):
            return await self.ends.poll_within(partitions, clock=self.clock, deadline=deadline)

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> Events:
        """(keys, values, next_offset): up to `max_events` events of `partition` from `offset`
        (none at the end)."""
        self._check_known_kind("ints")
        cursor = self.cursor(partition)
        async with within_deadline(self.clock, deadline, f"read event log partition {partition}"):
            return await cursor.read(offset, max_events, deadline=deadline)

    async def append_records(
        self, batches: Mapping[int, Sequence[tuple[Key, bytes]]], *, deadline: float
    ) -> dict[int, int]:
        """Append to a record log one batch of (key, event JSON object bytes) to each partition
        of `batches`, as one segment; each partition's first offset. Every key must be of its
        partition (`partition_of_key`), every event one JSON object of at most 64 KiB
        (stored in msgspec's compact form): InvalidArgument before writing otherwise, and for
        a log not declared a record log (`declare_records`)."""
        hashed = {
            partition: [(key_hash(key), event) for key, event in pairs]
            for partition, pairs in batches.items()
        }
        return await self.append_hashed(hashed, deadline=deadline)

    async def append_hashed(
        self, batches: Mapping[int, Sequence[tuple[int, bytes]]], *, deadline: float
    ) -> dict[int, int]:
        """`append_records` of (key hash, event) pairs: each key already `key_hash`ed."""
        async with within_deadline(self.clock, deadline, "append records to the event log"):
            layout = await self._require_kind("records", deadline)
            checked = {
                partition: check_records(
                    partition,
                    [hashed for hashed, _ in pairs],
                    [event for _, event in pairs],
                    layout.partitions,
                )
                for partition, pairs in batches.items()
            }
            return await self._writer.append_records(checked, deadline=deadline)

    async def read_records(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[Sequence[bytes], int]:
        """(events, next_offset): up to `max_events` events of a record log's `partition` from
        `offset`, each its JSON object's bytes (none at the end); cached and indexed as `read`."""
        self._check_known_kind("records")
        cursor = self.cursor(partition)
        async with within_deadline(self.clock, deadline, f"read event log partition {partition}"):
            return await cursor.read_records(offset, max_events, deadline=deadline)

    async def end_offset(self, partition: int, *, deadline: float) -> int:
        """The offset after the last event of `partition` as the index says (0 when empty)."""
        return (await self.end_offsets([partition], deadline=deadline))[partition]

    async def end_offsets(self, partitions: Sequence[int], *, deadline: float) -> dict[int, int]:
        """Each partition's end as the index says now (a conditional GET per 1,024)."""
        for partition in partitions:
            check_partition(partition)
        async with within_deadline(self.clock, deadline, "read the event log's ends"):
            await self.ends.poll_within(partitions, clock=self.clock, deadline=deadline)
        return {partition: self.ends.published(partition)[0] for partition in partitions}

    async def declare_partitions(self, partitions: int, *, deadline: float) -> None:
        """Record the partition count of an int log once (`events/layout.json`); the same
        count again is a no-op, another count is Refused, a record log InvalidArgument."""
        await self._declare(LogLayout(partitions, "ints"), deadline)

    async def declare_records(
        self, partitions: int = RECORD_PARTITIONS_DEFAULT, *, deadline: float
    ) -> None:
        """Declare a record log of `partitions` partitions (a multiple of 256) once; the same
        again is a no-op; a log declared otherwise is InvalidArgument."""
        await self._declare(LogLayout(partitions, "records"), deadline)

    async def _declare(self, wanted: LogLayout, deadline: float) -> None:
        body = encode_layout(wanted.partitions, wanted.kind)
        async with within_deadline(self.clock, deadline, f"create {LAYOUT_PATH}"):
            resolution = await retry_until(
                lambda: create_settled(self.store, LAYOUT_PATH, body),
                what=f"create {LAYOUT_PATH}",
                clock=self.clock,
                deadline=deadline,
            )
            if not resolution.ours:
                existing = await self.layout(deadline=deadline)
                if existing is not None and existing != wanted:
                    _refuse_declaration(existing, wanted)
            self._layout = wanted
            # Every partition's end in the index (0 until appended): consumers of an empty
            # log see it caught up (DC-21) without reading anything else.
            await self._writer.publish_empty(wanted.partitions, deadline=deadline)

    async def partitions(self, *, deadline: float) -> int | None:
        """The declared partition count, or None if no producer declared one; Refused for a
        log of layout 1."""
        layout = await self.layout(deadline=deadline)
        return None if layout is None else layout.partitions

    async def layout(self, *, deadline: float) -> LogLayout | None:
        """The declared (partitions, kind), or None if no producer declared one (read again
        on every call until it is found; then kept, as the record is create-only)."""
        async with within_deadline(self.clock, deadline, f"read {LAYOUT_PATH}"):
            got = await get_or_none(self.store, LAYOUT_PATH, clock=self.clock, deadline=deadline)
        if got is not None:
            self._layout = decode_layout(got.body)
        return self._layout

    async def _require_kind(self, kind: LogKind, deadline: float) -> LogLayout:
        """The log's layout, InvalidArgument unless it is of `kind`; an undeclared log is an
        int log (read once per EventLog), and cannot take records."""
        layout = self._layout
        if layout is None and not (kind == "ints" and self._undeclared):
            layout = await self.layout(deadline=deadline)
            self._undeclared = layout is None
        if layout is None:
            if kind == "records":
                raise InvalidArgument(
                    f"{LAYOUT_PATH}: the event log is not declared; declare it a record log "
                    "first (EventLog.declare_records, or a Producer)"
                )
            return LogLayout(0, "ints")
        self._check_known_kind(kind)
        return layout

    def _check_known_kind(self, kind: LogKind) -> None:
        if self._layout is not None and self._layout.kind != kind:
            use = {"ints": "read/append_batches", "records": "read_records/append_records"}
            raise InvalidArgument(
                f"{LAYOUT_PATH}: the event log holds {self._layout.kind}, not {kind}; use "
                f"EventLog.{use[self._layout.kind]}, or another store for a log of {kind}"
            )


def _refuse_declaration(existing: LogLayout, wanted: LogLayout) -> None:
    if existing.kind == wanted.kind == "ints":
        raise Refused(
            f"{LAYOUT_PATH}: the log has {existing.partitions} partitions, not {wanted.partitions}"
        )
    raise InvalidArgument(
        f"{LAYOUT_PATH}: the log is declared with {existing.partitions} partitions of "
        f"{existing.kind}, not {wanted.partitions} of {wanted.kind}; give "
        f"{existing.partitions} partitions of {existing.kind}, or use another store"
    )
