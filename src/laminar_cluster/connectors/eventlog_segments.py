"""Objects of the event log: segments, the `EventSegment` record and the layout record
(DC §3.1, DC §3.7: a Kafka-like partitioned log, partition p read by the owner of
vnode p % 256).

| path | record | write mode | writer |
| --- | --- | --- | --- |
| `events/segment={seq:020}.json` | `EventSegment` | create-only | a producer |
| `events/layout.json` | `EventLogLayout` (ints) or `RecordLogLayout` | create-only | the producer |

The log is one sequence of segments, numbered from 0 without gaps (a producer creates segment
n only once it knows segment n - 1 exists). A segment holds one batch for each of some
partitions: one producer flush is one object, whatever the number of partitions it touches.
A batch is columnar: event i has key `keys[i]`, value `values[i]` and offset
`first_offset + i`. Batches of one partition are contiguous from offset 0, each naming the
segment of the partition's previous batch (`previous`, -1 for its first), so a reader walks a
partition's batches back from its last one (`eventlog_ends`) without touching other segments.
Parsers re-format the parsed path and compare.

A log is of one kind, which its layout record says: an int log (layout 2, `EventLogLayout`:
these segments) or a record log (layout 3, `RecordLogLayout`: `eventlog_records`). A segment
says its own kind too (segment version 1: int columns, 2: records), so reading needs no layout.

Layout 1 (one object per partition batch, `events/partition=.../offset=...`) is not read: its
layout record is refused with what to do.
"""

from __future__ import annotations

import re
from typing import Final, Literal, NamedTuple, Protocol

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.codec import I64, U32, U64, Record, decode, encode_checked
from laminar_cluster.errors import CorruptRecord, InvalidArgument, Refused

EVENTS_PREFIX: Final = "events/"
SEGMENTS_PREFIX: Final = "events/segment="
LAYOUT_PATH: Final = "events/layout.json"
EVENT_LOG_PARTITIONS_MAX: Final = 65_536
EVENT_BATCH_EVENTS_MAX: Final = 65_536
# One segment holds at most this many events in all (one producer flush; a larger flush is
# several segments): 131,072 events of a 20-digit key and a 20-character value fit in 6 MB.
SEGMENT_EVENTS_MAX: Final = 131_072
SEGMENT_BYTES_MAX: Final = 8 * 1024 * 1024
EVENT_LOG_LAYOUT_BYTES_MAX: Final = 256
U64_MAX: Final = 2**64 - 1
SEQ_MAX: Final = 10**20 - 1  # paths hold 20 digits

_SEGMENT = re.compile(r"events/segment=([0-9]{20})\.json")

Columns = tuple[tuple[int, ...], tuple[int, ...]]  # keys, values


class SegmentBatch(Record):
    """Events `first_offset ..< first_offset + len(keys)` of one partition, columnar;
    `previous` is the segment of the partition's batch before it (-1: this is its first)."""

    partition: U32
    first_offset: U64
    previous: I64
    keys: tuple[U64, ...]
    values: tuple[I64, ...]

    @property
    def end(self) -> int:
        return self.first_offset + len(self.keys)


class EventSegment(Record):
    """Segment `seq`: one batch of each of some partitions, ascending by partition."""

    version: Literal[1]
    seq: U64
    batches: tuple[SegmentBatch, ...]


class EventLogLayout(Record):
    """How many partitions the log has, and its layout (2: segments)."""

    version: Literal[2]
    partitions: U32


class RecordLogLayout(Record):
    """A record log's layout (3): its partition count, a multiple of 256."""

    version: Literal[3]
    partitions: U32
    kind: Literal["records"]


LogKind = Literal["ints", "records"]


class LogLayout(NamedTuple):
    """What a layout record declares: the partition count and the kind of events."""

    partitions: int
    kind: LogKind


class _LayoutOne(Record):
    """The layout record of layout 1 (one object per partition batch), recognised to refuse."""

    version: Literal[1]
    partitions: U32


def check_partition(partition: int) -> None:
    if not 0 <= partition < EVENT_LOG_PARTITIONS_MAX:
        raise InvalidArgument(
            f"event log partition {partition} is outside 0..<{EVENT_LOG_PARTITIONS_MAX}"
        )


def segment_path(seq: int) -> str:
    if not 0 <= seq <= SEQ_MAX:
        raise InvalidArgument(f"event log segment {seq} is outside 0..={SEQ_MAX}")
    return f"{SEGMENTS_PREFIX}{seq:020d}.json"


def parse_segment_path(path: str) -> int:
    """The sequence number of a segment path; CorruptRecord if it is not canonical."""
    match = _SEGMENT.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not an event log segment path", key=path)
    return int(match.group(1))


def partitions_of_vnode(vnode: int, partitions: int, vnode_count: int = VNODE_COUNT) -> list[int]:
    """The partitions `vnode` reads: each p in 0..<partitions with p % vnode_count == vnode."""
    if not 0 <= vnode < vnode_count:
        raise InvalidArgument(f"vnode {vnode} is outside 0..<{vnode_count}")
    if not 0 <= partitions <= EVENT_LOG_PARTITIONS_MAX:
        raise InvalidArgument(
            f"partition count {partitions} is outside 0..={EVENT_LOG_PARTITIONS_MAX}"
        )
    return list(range(vnode, partitions, vnode_count))


def vnode_of_partition(partition: int, vnode_count: int = VNODE_COUNT) -> int:
    check_partition(partition)
    return partition % vnode_count


def check_columns(partition: int, keys: tuple[int, ...], values: tuple[int, ...]) -> None:
    """InvalidArgument unless 1..EVENT_BATCH_EVENTS_MAX events, u64 keys, i64 values, equal
    columns (checked before anything is written)."""
    check_partition(partition)
    what = f"event log partition {partition}"
    if len(keys) != len(values):
        raise InvalidArgument(f"{what}: {len(keys)} keys but {len(values)} values")
    if not 1 <= len(keys) <= EVENT_BATCH_EVENTS_MAX:
        raise InvalidArgument(
            f"{what}: batch holds {len(keys)} events; allowed 1..={EVENT_BATCH_EVENTS_MAX}"
        )
    if any(not 0 <= key <= U64_MAX for key in keys):
        raise InvalidArgument(f"{what}: a key is outside the u64 range")
    if any(not -(2**63) <= value < 2**63 for value in values):
        raise InvalidArgument(f"{what}: a value is outside the i64 range")


def encode_segment(seq: int, batches: tuple[SegmentBatch, ...]) -> bytes:
    """The canonical bytes of segment `seq` (batches ascending by partition, checked by
    `check_columns` before); InvalidArgument when it is too large."""
    path = segment_path(seq)
    total = sum(len(batch.keys) for batch in batches)
    if not batches or total > SEGMENT_EVENTS_MAX:
        raise InvalidArgument(
            f"{path}: a segment holds 1..={SEGMENT_EVENTS_MAX} events, not {total}"
        )
    for batch in batches:
        if batch.end > U64_MAX:
            raise InvalidArgument(f"{path}: partition {batch.partition} would end past u64")
    segment = EventSegment(version=1, seq=seq, batches=batches)
    return encode_checked(segment, what=path, max_bytes=SEGMENT_BYTES_MAX)


def decode_segment(path: str, body: bytes) -> EventSegment:
    """The segment stored at `path`, checked against its path and its own rules (partitions
    ascending, batches well formed, `previous` before the segment, a first batch at offset 0);
    CorruptRecord otherwise."""
    seq = parse_segment_path(path)
    segment = decode(body, EventSegment, key=path, max_bytes=SEGMENT_BYTES_MAX)
    if segment.seq != seq or not segment.batches:
        raise CorruptRecord(
            f"{path}: holds segment {segment.seq} of {len(segment.batches)} batches", key=path
        )
    last = -1
    for batch in segment.batches:
        wrong = batch_fault(batch, len(batch.keys), len(batch.values), seq)
        if wrong is None and batch.partition <= last:
            wrong = "partitions are not ascending"
        if wrong is not None:
            raise CorruptRecord(f"{path}: partition {batch.partition}: {wrong}", key=path)
        last = batch.partition
    return segment


class _Linked(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def previous(self) -> int: ...
    @property
    def end(self) -> int: ...


def batch_fault(batch: _Linked, firsts: int, seconds: int, seq: int) -> str | None:
    """What is wrong with a decoded batch of segment `seq` whose two columns hold `firsts` and
    `seconds` items (keys and values, or key hashes and records), or None."""
    if batch.partition >= EVENT_LOG_PARTITIONS_MAX:
        return "partition out of range"
    if firsts != seconds or not firsts:
        return f"columns of {firsts} and {seconds} items"
    if not -1 <= batch.previous < seq:
        return f"previous segment {batch.previous} is not before segment {seq}"
    if (batch.previous == -1) != (batch.first_offset == 0):
        return f"first offset {batch.first_offset} with previous segment {batch.previous}"
    if batch.end > U64_MAX:
        return "ends past the u64 offset range"
    return None


def encode_layout(partitions: int, kind: LogKind = "ints") -> bytes:
    """The layout record of a log of `partitions` partitions of `kind` (ints: layout 2, as
    before record logs; records: layout 3, a multiple of 256 partitions)."""
    if not 1 <= partitions <= EVENT_LOG_PARTITIONS_MAX:
        raise InvalidArgument(
            f"partition count {partitions} is outside 1..={EVENT_LOG_PARTITIONS_MAX}"
        )
    layout: EventLogLayout | RecordLogLayout = EventLogLayout(version=2, partitions=partitions)
    if kind == "records":
        if partitions % VNODE_COUNT:
            raise InvalidArgument(
                f"a record log has a multiple of {VNODE_COUNT} partitions, not {partitions}"
            )
        layout = RecordLogLayout(version=3, partitions=partitions, kind=kind)
    return encode_checked(layout, what=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX)


def decode_layout(body: bytes) -> LogLayout:
    """The declared partition count and kind (layout 2: ints; 3: records); Refused for a
    layout-1 log, CorruptRecord otherwise."""
    layout: EventLogLayout | RecordLogLayout
    try:
        layout = decode(body, EventLogLayout, key=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX)
    except CorruptRecord:
        try:
            layout = decode(
                body, RecordLogLayout, key=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX
            )
        except CorruptRecord:
            _refuse_layout_one(body)
            raise
    kind: LogKind = "ints" if isinstance(layout, EventLogLayout) else "records"
    step = VNODE_COUNT if kind == "records" else 1
    if not 1 <= layout.partitions <= EVENT_LOG_PARTITIONS_MAX or layout.partitions % step:
        raise CorruptRecord(
            f"{LAYOUT_PATH}: partition count {layout.partitions} is outside "
            f"1..={EVENT_LOG_PARTITIONS_MAX} or not a multiple of {step}",
            key=LAYOUT_PATH,
        )
    return LogLayout(layout.partitions, kind)


def _refuse_layout_one(body: bytes) -> None:
    try:
        decode(body, _LayoutOne, key=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX)
    except CorruptRecord:
        return
    raise Refused(
        f"{LAYOUT_PATH}: this event log was written in layout 1 (one object per partition "
        "batch, by laminar-cluster before segments), which this version does not read; "
        "produce the events again into an empty store"
    )
