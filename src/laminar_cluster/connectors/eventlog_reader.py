"""Reading the event log (DC §3.7): segments read once per process, and per partition the
chain of its batches, walked back from the index (`eventlog_ends`).

`SegmentReader` GETs a segment once and keeps it decoded (least recently used out beyond
`SEGMENT_CACHE_EVENTS_MAX` events or `SEGMENT_CACHE_BYTES_MAX` bytes; concurrent readers of one
segment share one GET), so a node reading many partitions of one producer flush reads that
flush's object once. A segment says its kind (int columns or records, `eventlog_records`);
reading a partition as the other kind is InvalidArgument, saying which read to use.

`PartitionCursor` is what one process knows of one partition: the batches it linked so far, as
(first offset, end, segment, previous segment), contiguous. To read past what it linked it
takes the partition's (end, last segment) from the index and walks back through `previous`
until it meets what it knew (or, knowing nothing, the batch holding the offset): each step
reads a segment that holds the partition, and checks that the batch ends where the next one
starts (the last one where the index says). A segment that is gone, lacks the batch the index
or a `previous` names, or breaks contiguity, and an offset past the end, are CorruptRecord:
segments are never deleted. A cursor whose consumer polls the index itself (`EndsView.polled`)
reads what the last poll said; otherwise a read caught up with the index reads it again (a
conditional GET).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.connectors.eventlog_ends import EndsView
from laminar_cluster.connectors.eventlog_records import (
    RecordBatch,
    decode_record_segment,
    is_record_segment,
)
from laminar_cluster.connectors.eventlog_segments import (
    SegmentBatch,
    check_partition,
    decode_segment,
    segment_path,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.store import GetResult, ObjectStore

SEGMENT_CACHE_EVENTS_MAX: Final = 1_048_576
# Record segments hold up to 64 KiB per event: the cache is bounded by their bytes too.
SEGMENT_CACHE_BYTES_MAX: Final = 128 * 1024 * 1024
CHAIN_WALK_MAX: Final = 10**9  # bounds a walk; a partition of more batches is refused

Events = tuple[tuple[int, ...], tuple[int, ...], int]  # keys, values, next offset
Batch = SegmentBatch | RecordBatch
Segment = dict[int, Batch]  # partition -> its batch in the segment
_Slice = tuple[Batch, int, int]  # a batch, and the positions start ..< stop read of it


class SegmentReader:
    """The decoded segments of one log that this process read or wrote, bounded."""

    def __init__(self, store: ObjectStore, clock: Clock) -> None:
        self._store, self._clock = store, clock
        # seq -> (segment, events, bytes)
        self._cache: OrderedDict[int, tuple[Segment, int, int]] = OrderedDict()
        self._events = self._bytes = 0
        self._loading: dict[int, asyncio.Event] = {}

    def remember(self, seq: int, batches: tuple[Batch, ...], size: int) -> None:
        """Keep a segment this process wrote, of `size` bytes (it is what the store holds)."""
        self._keep(seq, {batch.partition: batch for batch in batches}, size)

    async def segment(self, seq: int, *, deadline: float) -> Segment | None:
        """Segment `seq` (None when there is none); one GET per process while it is kept."""
        while True:
            hit = self._cache.get(seq)
            if hit is not None:
                self._cache.move_to_end(seq)
                return hit[0]
            loading = self._loading.get(seq)
            if loading is None:
                break
            await loading.wait()  # then a hit, or the loader failed and this one loads
        done = self._loading[seq] = asyncio.Event()
        try:
            return await self._load(seq, deadline)
        finally:
            del self._loading[seq]
            done.set()

    async def _load(self, seq: int, deadline: float) -> Segment | None:
        path = segment_path(seq)
        got = await get_or_none(self._store, path, clock=self._clock, deadline=deadline)
        if got is None:
            return None
        if not got.complete:
            raise CorruptRecord(f"{path}: read {len(got.body)} of {got.meta.size} bytes", key=path)
        decoded = (
            decode_record_segment(path, got.body)
            if is_record_segment(got.body)
            else decode_segment(path, got.body)
        )
        segment: Segment = {batch.partition: batch for batch in decoded.batches}
        self._keep(seq, segment, len(got.body))
        return segment

    def _keep(self, seq: int, segment: Segment, size: int) -> None:
        if seq in self._cache:
            return
        events = sum(batch.end - batch.first_offset for batch in segment.values())
        self._cache[seq] = (segment, events, size)
        self._events += events
        self._bytes += size
        while len(self._cache) > 1 and (
            self._events > SEGMENT_CACHE_EVENTS_MAX or self._bytes > SEGMENT_CACHE_BYTES_MAX
        ):
            _, (_, dropped, dropped_bytes) = self._cache.popitem(last=False)
            self._events -= dropped
            self._bytes -= dropped_bytes


@dataclass(frozen=True, slots=True)
class _Link:
    first: int
    end: int
    seq: int
    previous: int


class PartitionCursor:
    """One process's view of one partition: the contiguous batches it linked so far."""

    def __init__(
        self, segments: SegmentReader, ends: EndsView, partition: int, clock: Clock
    ) -> None:
        check_partition(partition)
        self.segments, self.ends, self.partition, self.clock = segments, ends, partition, clock
        self.chain: list[_Link] = []
        self._firsts: list[int] = []  # chain[i].first, for bisect

    @property
    def linked_end(self) -> int:
        return self.chain[-1].end if self.chain else 0

    async def read(self, offset: int, max_events: int, *, deadline: float) -> Events:
        """Up to `max_events` events from `offset` of an int log, and the offset after them."""
        parts, position = await self._read_slices(offset, max_events, deadline)
        keys, values = [], []
        for batch, start, stop in parts:
            if not isinstance(batch, SegmentBatch):
                raise self._wrong_kind("records", "read_records")
            keys.append(batch.keys[start:stop])
            values.append(batch.values[start:stop])
        return _joined(keys), _joined(values), position

    async def read_records(
        self, offset: int, max_events: int, *, deadline: float
    ) -> tuple[list[bytes], int]:
        """Up to `max_events` events (each one's JSON bytes) from `offset` of a record log, and
        the offset after them."""
        parts, position = await self._read_slices(offset, max_events, deadline)
        records: list[bytes] = []
        for batch, start, stop in parts:
            if not isinstance(batch, RecordBatch):
                raise self._wrong_kind("int columns", "read")
            records.extend(bytes(record) for record in batch.records[start:stop])
        return records, position

    def _wrong_kind(self, holds: str, use: str) -> InvalidArgument:
        return InvalidArgument(
            f"event log partition {self.partition} holds {holds}; read it with EventLog.{use}"
        )

    async def _read_slices(
        self, offset: int, max_events: int, deadline: float
    ) -> tuple[list[_Slice], int]:
        if offset < 0 or max_events < 1:
            raise InvalidArgument(
                f"event log partition {self.partition}: read at offset {offset} of "
                f"{max_events} events; need offset >= 0 and at least 1 event"
            )
        parts: list[_Slice] = []
        position, remaining = offset, max_events
        for _ in range(2):  # what is linked, then (at its end) what the index adds
            started = position
            await self._reach(position, deadline)
            index = bisect.bisect_right(self._firsts, position) - 1
            while remaining and 0 <= index < len(self.chain):
                batch = await self._batch_at(self.chain[index].seq, deadline)
                start = position - batch.first_offset
                taken = min(batch.end - position, remaining)
                parts.append((batch, start, start + taken))
                position, remaining, index = position + taken, remaining - taken, index + 1
            if not remaining or position == started:
                break
        return parts, position

    async def _reach(self, offset: int, deadline: float) -> None:
        """Link batches until the chain holds `offset` or ends at the published end."""
        if self.chain and offset < self.chain[0].first:
            await self._link_back(offset, deadline)
            return
        if offset < self.linked_end:
            return
        if not self.ends.polled or not self.ends.known(self.partition):
            await self.ends.poll_within([self.partition], clock=self.clock, deadline=deadline)
        end, last = self.ends.published(self.partition)
        if end > self.linked_end:
            await self._link_forward(end, last, offset, deadline)
        if offset > self.linked_end:
            raise CorruptRecord(
                f"event log partition {self.partition}: offset {offset} is past its end "
                f"{self.linked_end}",
                key=None,
            )

    async def _link_forward(self, end: int, last: int, offset: int, deadline: float) -> None:
        """Walk back from the index's last batch to the chain's end (or to `offset`)."""
        known = self.chain[-1] if self.chain else None
        walked: list[_Link] = []
        seq, want_end = last, end
        for _ in range(CHAIN_WALK_MAX):
            link = await self._link(seq, want_end, deadline)
            walked.append(link)
            if known is not None and link.previous <= known.seq:
                if link.previous < known.seq or link.first != known.end:
                    raise self._broken(link, f"does not follow segment {known.seq}")
                break
            if (known is None and link.first <= offset) or link.previous == -1:
                break
            seq, want_end = link.previous, link.first
        walked.reverse()
        self.chain.extend(walked)
        self._firsts.extend(link.first for link in walked)

    async def _link_back(self, offset: int, deadline: float) -> None:
        """Walk back from the chain's first batch to the one holding `offset`."""
        walked: list[_Link] = []
        head = self.chain[0]
        for _ in range(CHAIN_WALK_MAX):
            if head.first <= offset or head.previous == -1:
                break
            head = await self._link(head.previous, head.first, deadline)
            walked.append(head)
        walked.reverse()
        self.chain[:0] = walked
        self._firsts[:0] = [link.first for link in walked]

    async def _link(self, seq: int, want_end: int, deadline: float) -> _Link:
        batch = await self._batch_at(seq, deadline)
        link = _Link(batch.first_offset, batch.end, seq, batch.previous)
        if batch.end != want_end:
            raise self._broken(link, f"ends at offset {batch.end}, not {want_end}")
        return link

    async def _batch_at(self, seq: int, deadline: float) -> Batch:
        path = segment_path(seq)
        segment = await self.segments.segment(seq, deadline=deadline)
        if segment is None:
            raise CorruptRecord(f"{path}: a segment the log links to is gone", key=path)
        batch = segment.get(self.partition)
        if batch is None:
            raise CorruptRecord(
                f"{path}: holds no batch of partition {self.partition}, which the log links to it",
                key=path,
            )
        return batch

    def _broken(self, link: _Link, what: str) -> CorruptRecord:
        path = segment_path(link.seq)
        return CorruptRecord(
            f"{path}: partition {self.partition}'s batch at offset {link.first} {what}", key=path
        )


async def get_or_none(
    store: ObjectStore, path: str, *, clock: Clock, deadline: float
) -> GetResult | None:
    """The object at `path`, None when there is none; StoreUnavailable is retried until
    `deadline` (a read is always safe to repeat)."""
    try:
        return await retry_until(
            lambda: store.get(path), what=f"get {path}", clock=clock, deadline=deadline
        )
    except ObjectNotFound:
        return None


def _joined(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    if len(parts) == 1:
        return parts[0]
    return tuple(itertools.chain.from_iterable(parts))
