"""Appending to the event log (DC §3.7): one segment per append, whatever the number of
partitions it holds, then the index (`eventlog_ends`).

A process appends one segment at a time. Its writer knows the log's next segment number and,
per partition, the end and last segment (from the index shards it loaded and the segments it
read since). Starting, it loads the shards of the partitions it appends and reads every segment
from the lowest shard's `segments` to the first that does not exist, so batches whose index a
dead producer never published are known, and published with its next write. Then it creates
segment n at the next number: a create that finds another segment there means another
producer got n; the writer reads it (learning its batches) and tries n + 1, or, when that
segment holds a partition of its own, stops with `Contended`: a partition has one writer (the
next append starts afresh). So a writer reads every segment between two of its own, and what it
publishes as `segments` is true. An ambiguous create is settled by reading back
(`put_resolved`); a retried create writes the same bytes. A writer appends one kind of batch
(int columns or records) and refuses to append to a log holding segments of the other kind.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.connectors.eventlog_ends import (
    ENDS_SHARD_PARTITIONS,
    Published,
    publish_shard,
    read_shard,
    shard_of,
)
from laminar_cluster.connectors.eventlog_reader import Batch, Segment, SegmentReader
from laminar_cluster.connectors.eventlog_records import (
    RecordBatch,
    RecordColumns,
    encode_record_segment,
)
from laminar_cluster.connectors.eventlog_segments import (
    SEGMENT_EVENTS_MAX,
    Columns,
    SegmentBatch,
    check_columns,
    encode_segment,
    segment_path,
)
from laminar_cluster.errors import Contended, InvalidArgument, StoreUnavailable
from laminar_cluster.store import CREATE, ObjectStore, ReadBack, Resolution, put_resolved

# Segments of other producers an append steps over before it gives up (StoreUnavailable).
SEGMENT_RACES_MAX: Final = 1_024
# Bounds the segments a writer's start reads past the index (a log holds at most 10**20).
RECOVERY_SEGMENTS_MAX: Final = 10**20

C = TypeVar("C")
# Builds a partition's batch from (partition, first offset, previous segment, its columns).
Build = Callable[[int, int, int, C], Batch]


@dataclass
class _State:
    next_seq: int  # every segment below it exists and was read (or loaded from an index)
    low: int  # the lowest segment this writer read from (segments below: in loaded shards)
    known: dict[int, Published] = field(default_factory=dict)
    loaded: set[int] = field(default_factory=set)  # index shards loaded
    dirty: set[int] = field(default_factory=set)  # shards whose partitions learned more
    kinds: set[type] = field(default_factory=set)  # the batch types of segments learned

    def learn(self, seq: int, segment: Segment) -> None:
        for partition, batch in segment.items():
            self.kinds.add(type(batch))
            if batch.end > self.known.get(partition, (0, -1))[0]:
                self.known[partition] = (batch.end, seq)
                self.dirty.add(shard_of(partition))


class SegmentWriter:
    """The appending side of one process's event log."""

    def __init__(self, store: ObjectStore, segments: SegmentReader, clock: Clock) -> None:
        self._store, self._segments, self._clock = store, segments, clock
        self._lock = asyncio.Lock()
        self._state: _State | None = None

    async def append(self, batches: Mapping[int, Columns], *, deadline: float) -> dict[int, int]:
        """Create one segment holding `batches` (partition -> int columns) and publish it; each
        partition's first offset. InvalidArgument before writing for a bad batch."""
        return await self._append(_checked(batches), _int_batch, SegmentBatch, deadline)

    async def append_records(
        self, batches: Mapping[int, RecordColumns], *, deadline: float
    ) -> dict[int, int]:
        """`append` for a record log: `batches` maps partitions to columns already checked by
        `check_records`."""
        total = sum(len(records) for _, records in batches.values())
        if not batches or total > SEGMENT_EVENTS_MAX:
            raise InvalidArgument(
                f"an append of {total} events; one segment holds 1..={SEGMENT_EVENTS_MAX}"
            )
        return await self._append(dict(batches), _record_batch, RecordBatch, deadline)

    async def _append(
        self, batches: dict[int, C], build: Build[C], kind: type[Batch], deadline: float
    ) -> dict[int, int]:
        async with self._lock:
            state = await self._ready(batches.keys(), deadline)
            foreign = [other.__name__ for other in state.kinds if other is not kind]
            if foreign:
                raise InvalidArgument(
                    f"the event log holds segments of {foreign[0]}; this append is of "
                    f"{kind.__name__}: a log holds one kind"
                )
            try:
                firsts = await self._create(state, batches, build, deadline)
            except Contended:
                self._state = None
                raise
            await self._publish(state, deadline)
            return firsts

    async def recover(self, partitions: Iterable[int], *, deadline: float) -> dict[int, int]:
        """Load and repair the index of `partitions` (publishing what a dead producer left
        unpublished); each one's end."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        async with self._lock:
            state = await self._ready(wanted, deadline)
            await self._publish(state, deadline)
            return {partition: state.known.get(partition, (0, -1))[0] for partition in wanted}

    async def _ready(self, partitions: Iterable[int], deadline: float) -> _State:
        shards = {shard_of(partition) for partition in partitions}
        state = self._state
        if state is not None and shards <= state.loaded:
            return state
        counts = []
        loaded: dict[int, Published] = {}
        for shard in sorted(shards - (set() if state is None else state.loaded)):
            record, _ = await retry_until(
                functools.partial(read_shard, self._store, shard),
                what=f"read event log index shard {shard}",
                clock=self._clock,
                deadline=deadline,
            )
            counts.append(0 if record is None else record.segments)
            if record is not None:
                base = shard * ENDS_SHARD_PARTITIONS
                for index, end in enumerate(record.ends):
                    if end:
                        loaded[base + index] = (end, record.lasts[index])
        low = min(counts)
        if state is None:
            state = _State(next_seq=low, low=low)
        for partition, published in loaded.items():
            if published[0] > state.known.get(partition, (0, -1))[0]:
                state.known[partition] = published
        state.loaded |= shards
        await self._read_range(state, low, state.low, deadline)
        state.low = min(state.low, low)
        await self._read_on(state, deadline)
        self._state = state
        return state

    async def _read_range(self, state: _State, low: int, high: int, deadline: float) -> None:
        """Learn segments low ..< high (a shard loaded late, behind what this writer read)."""
        for seq in range(low, high):
            segment = await self._segments.segment(seq, deadline=deadline)
            if segment is not None:
                state.learn(seq, segment)

    async def _read_on(self, state: _State, deadline: float) -> None:
        """Learn segments from `next_seq` to the first that does not exist."""
        for _ in range(RECOVERY_SEGMENTS_MAX):
            segment = await self._segments.segment(state.next_seq, deadline=deadline)
            if segment is None:
                return
            state.learn(state.next_seq, segment)
            state.next_seq += 1

    async def _create(
        self, state: _State, batches: dict[int, C], build: Build[C], deadline: float
    ) -> dict[int, int]:
        for _ in range(SEGMENT_RACES_MAX):
            seq = state.next_seq
            entries = tuple(
                build(partition, *state.known.get(partition, (0, -1)), columns)
                for partition, columns in sorted(batches.items())
            )
            path, body = segment_path(seq), _encoded(seq, entries)
            resolution = await retry_until(
                functools.partial(create_settled, self._store, path, body),
                what=f"create {path}",
                clock=self._clock,
                deadline=deadline,
            )
            if resolution.ours:
                self._segments.remember(seq, entries, len(body))
                state.learn(seq, {entry.partition: entry for entry in entries})
                state.next_seq = seq + 1
                return {entry.partition: entry.first_offset for entry in entries}
            found = await self._segments.segment(seq, deadline=deadline)
            if found is None:
                raise StoreUnavailable(f"{path}: another producer's segment vanished")
            state.learn(seq, found)
            state.next_seq = seq + 1
            ours = sorted(found.keys() & batches.keys())
            if ours:
                raise Contended(
                    f"{path}: another producer appended to partitions {ours[:8]}; a partition "
                    "must have one writer"
                )
        raise StoreUnavailable(f"{SEGMENT_RACES_MAX} segments of other producers in a row")

    async def _publish(self, state: _State, deadline: float) -> None:
        """Publish what every dirty shard's partitions learned (a shard learned of only
        through segments is loaded first, so its `segments` stays true)."""
        unloaded = state.dirty - state.loaded
        if unloaded:
            await self._ready([shard * ENDS_SHARD_PARTITIONS for shard in unloaded], deadline)
        for shard in sorted(state.dirty):
            published = {p: known for p, known in state.known.items() if shard_of(p) == shard}
            await self._publish_shard(shard, published, state.next_seq, deadline)
            state.dirty.discard(shard)

    async def publish_empty(self, partitions: int, *, deadline: float) -> None:
        """Put partitions 0..<`partitions` in the index with end 0 where they are not yet."""
        zeros: dict[int, Published] = dict.fromkeys(range(partitions), (0, -1))
        for shard in sorted({shard_of(partition) for partition in zeros}):
            here = {p: value for p, value in zeros.items() if shard_of(p) == shard}
            await self._publish_shard(shard, here, 0, deadline)

    async def _publish_shard(
        self, shard: int, published: Mapping[int, Published], segments: int, deadline: float
    ) -> None:
        await retry_until(
            functools.partial(publish_shard, self._store, shard, published, segments),
            what=f"publish event log index shard {shard}",
            clock=self._clock,
            deadline=deadline,
        )


async def create_settled(store: ObjectStore, path: str, body: bytes) -> Resolution:
    resolution = await put_resolved(store, path, body, CREATE)
    if resolution.state is ReadBack.ABSENT:  # did not land: the same bytes may be sent again
        raise StoreUnavailable(f"{path}: create did not land")
    return resolution


def _checked(batches: Mapping[int, Columns]) -> dict[int, Columns]:
    if not batches:
        raise InvalidArgument("an append needs at least one partition's batch")
    checked: dict[int, Columns] = {}
    for partition, (keys, values) in batches.items():
        columns = (tuple(keys), tuple(values))
        check_columns(partition, *columns)
        checked[partition] = columns
    total = sum(len(keys) for keys, _ in checked.values())
    if total > SEGMENT_EVENTS_MAX:
        raise InvalidArgument(
            f"an append of {total} events; one segment holds at most {SEGMENT_EVENTS_MAX}"
        )
    return checked


def _int_batch(partition: int, first: int, previous: int, columns: Columns) -> Batch:
    keys, values = columns
    return SegmentBatch(
        partition=partition, first_offset=first, previous=previous, keys=keys, values=values
    )


def _record_batch(partition: int, first: int, previous: int, columns: RecordColumns) -> Batch:
    hashes, records = columns
    return RecordBatch(
        partition=partition,
        first_offset=first,
        previous=previous,
        key_hashes=hashes,
        records=tuple(msgspec.Raw(record) for record in records),
    )


def _encoded(seq: int, entries: tuple[Batch, ...]) -> bytes:
    if all(isinstance(entry, SegmentBatch) for entry in entries):
        return encode_segment(seq, entries)  # type: ignore[arg-type]
    if all(isinstance(entry, RecordBatch) for entry in entries):
        return encode_record_segment(seq, entries)  # type: ignore[arg-type]
    raise InvalidArgument("a segment holds batches of one kind")
