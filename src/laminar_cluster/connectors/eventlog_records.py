"""Record logs: the event log's second kind, whose events are users' JSON objects keyed by a
user key (DC §3.7 "Record logs").

A log is of one kind, which its layout record says (`eventlog_segments.LogLayout`): an int
log (layout 2, the reference workload's u64 keys and i64 values) or a record log (layout 3,
`kind: "records"`). A record log's segment is a `RecordSegment` (segment version 2): per
partition a batch of `key_hashes` (xxh3_64 of each event's encoded key) and `records`, each
event one JSON object embedded in the segment as it is (`msgspec.Raw`), so a reader slices
the events' bytes out without parsing them (measured for 8,192-event segments of ~100-byte
events: 3.2 ms to read and check a segment, against 5.9 ms with each event a JSON string,
which is also 18% larger).

Keys: an event's key is encoded by `assignment.vnode.encode_key` (str, bytes, int, tuples), and
`partition_of_key(key, P) = xxh3_64(encode_key(key)) % P` with P a multiple of 256, so
`partition % 256 == vnode_of(key)`: the vnode reading partition p (p % 256) holds every event
of each of its keys, which keyed state needs.

Events are written in one form, msgspec's compact encoding of the decoded object
(`canonical_event`: what `msgspec.json.encode` gives for a dict), at most
`EVENT_RECORD_BYTES_MAX` bytes each. A reader checks the segment strictly (its bytes around
the events canonical, every event a JSON object within the limit and of the partition's
vnode); it does not parse each event again (the job does, and refuses what it cannot read).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, Literal

import msgspec
import xxhash

from laminar_cluster.assignment.vnode import VNODE_COUNT, Key, encode_key
from laminar_cluster.codec import I64, U32, U64, Record, decode, encode_checked
from laminar_cluster.connectors.eventlog_segments import (
    EVENT_BATCH_EVENTS_MAX,
    EVENT_LOG_PARTITIONS_MAX,
    SEGMENT_BYTES_MAX,
    SEGMENT_EVENTS_MAX,
    U64_MAX,
    batch_fault,
    check_partition,
    parse_segment_path,
    segment_path,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument

EVENT_RECORD_BYTES_MAX: Final = 64 * 1024
RECORD_PARTITIONS_DEFAULT: Final = 256
# The canonical bytes of a segment start with its version, which tells the kinds apart.
_RECORD_SEGMENT_PREFIX: Final = b'{"version":2,'
_OPEN_BRACE: Final = ord("{")
_EVENT_DECODER: Final = msgspec.json.Decoder()
_EVENT_ENCODER: Final = msgspec.json.Encoder()
_XXH3: Final = xxhash.xxh3_64_intdigest
_PACK_LENGTH: Final = struct.Struct("<I").pack

RecordColumns = tuple[tuple[int, ...], tuple[bytes, ...]]  # key hashes, events' JSON bytes


class RecordBatch(Record):
    """Events `first_offset ..< first_offset + len(records)` of one partition of a record log:
    `key_hashes[i]` is xxh3_64 of event i's encoded key, `records[i]` its JSON object."""

    partition: U32
    first_offset: U64
    previous: I64
    key_hashes: tuple[U64, ...]
    records: tuple[msgspec.Raw, ...]

    @property
    def end(self) -> int:
        return self.first_offset + len(self.records)


class RecordSegment(Record):
    """Segment `seq` of a record log: one batch of each of some partitions, ascending."""

    version: Literal[2]
    seq: U64
    batches: tuple[RecordBatch, ...]


def key_hash(key: Key) -> int:
    """xxh3_64 of the key's canonical encoding (`encode_key`): what a record log stores.
    InvalidArgument for a value that is no key. A str key (the common one) is encoded here
    directly, as `encode_key` would."""
    if type(key) is str:
        data = key.encode("utf-8")
        return int(_XXH3(b"s" + _PACK_LENGTH(len(data)) + data))
    return int(_XXH3(encode_key(key)))


def check_record_partitions(partitions: int) -> None:
    """InvalidArgument unless `partitions` is a positive multiple of 256 within the log's
    maximum (so that `partition % 256` is the key's vnode)."""
    if not 1 <= partitions <= EVENT_LOG_PARTITIONS_MAX or partitions % VNODE_COUNT:
        raise InvalidArgument(
            f"a record log has a multiple of {VNODE_COUNT} partitions up to "
            f"{EVENT_LOG_PARTITIONS_MAX}, not {partitions}"
        )


def partition_of_key(key: Key, partitions: int) -> int:
    """The partition of a record log of `partitions` partitions that holds `key`'s events:
    `key_hash(key) % partitions`; its `% 256` is the key's vnode."""
    check_record_partitions(partitions)
    return key_hash(key) % partitions


def canonical_event(event: bytes) -> bytes:
    """The stored form of one event: msgspec's compact encoding of the JSON object `event`
    holds; InvalidArgument when it is not one JSON object or is larger than
    EVENT_RECORD_BYTES_MAX bytes (either way)."""
    if len(event) > EVENT_RECORD_BYTES_MAX:
        raise InvalidArgument(
            f"an event is {len(event)} bytes; maximum is {EVENT_RECORD_BYTES_MAX}"
        )
    try:
        value = _EVENT_DECODER.decode(event)
    except (msgspec.DecodeError, RecursionError) as error:
        raise InvalidArgument(f"an event is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"an event is a JSON {type(value).__name__}, not an object")
    stored = _EVENT_ENCODER.encode(value)
    if len(stored) > EVENT_RECORD_BYTES_MAX:
        raise InvalidArgument(
            f"an event is {len(stored)} bytes; maximum is {EVENT_RECORD_BYTES_MAX}"
        )
    return stored


def check_records(
    partition: int, key_hashes: Sequence[int], records: Sequence[bytes], partitions: int
) -> RecordColumns:
    """The batch as stored (each event `canonical_event`), checked before anything is
    written: 1..EVENT_BATCH_EVENTS_MAX events, a u64 hash each, every hash in `partition`."""
    check_partition(partition)
    what = f"event log partition {partition}"
    if len(key_hashes) != len(records):
        raise InvalidArgument(f"{what}: {len(key_hashes)} key hashes but {len(records)} events")
    if not 1 <= len(records) <= EVENT_BATCH_EVENTS_MAX:
        raise InvalidArgument(
            f"{what}: batch holds {len(records)} events; allowed 1..={EVENT_BATCH_EVENTS_MAX}"
        )
    if partition >= partitions:
        raise InvalidArgument(f"{what}: the log has {partitions} partitions")
    for hashed in key_hashes:
        if not 0 <= hashed <= U64_MAX or hashed % partitions != partition:
            raise InvalidArgument(
                f"{what}: key hash {hashed} belongs to partition {hashed % partitions} of "
                f"{partitions} (use partition_of_key)"
            )
    return tuple(key_hashes), tuple(canonical_event(bytes(record)) for record in records)


def encode_record_segment(seq: int, batches: tuple[RecordBatch, ...]) -> bytes:
    """The canonical bytes of record segment `seq` (batches checked by `check_records`);
    InvalidArgument when it holds too many events or bytes."""
    path = segment_path(seq)
    total = sum(len(batch.records) for batch in batches)
    if not batches or total > SEGMENT_EVENTS_MAX:
        raise InvalidArgument(
            f"{path}: a segment holds 1..={SEGMENT_EVENTS_MAX} events, not {total}"
        )
    for batch in batches:
        if batch.end > U64_MAX:
            raise InvalidArgument(f"{path}: partition {batch.partition} would end past u64")
    segment = RecordSegment(version=2, seq=seq, batches=batches)
    return encode_checked(segment, what=path, max_bytes=SEGMENT_BYTES_MAX)


def is_record_segment(body: bytes) -> bool:
    """Whether `body` claims to be a record segment (its canonical first bytes say so)."""
    return body.startswith(_RECORD_SEGMENT_PREFIX)


def decode_record_segment(path: str, body: bytes) -> RecordSegment:
    """The record segment at `path`, checked as `decode_segment` checks an int one, and each
    event a JSON object of at most EVENT_RECORD_BYTES_MAX bytes whose key hash is of the
    partition's vnode; CorruptRecord otherwise."""
    seq = parse_segment_path(path)
    segment = decode(body, RecordSegment, key=path, max_bytes=SEGMENT_BYTES_MAX)
    if segment.seq != seq or not segment.batches:
        raise CorruptRecord(
            f"{path}: holds segment {segment.seq} of {len(segment.batches)} batches", key=path
        )
    last = -1
    for batch in segment.batches:
        wrong = batch_fault(batch, len(batch.key_hashes), len(batch.records), seq)
        if wrong is None and batch.partition <= last:
            wrong = "partitions are not ascending"
        if wrong is None:
            wrong = _records_fault(batch)
        if wrong is not None:
            raise CorruptRecord(f"{path}: partition {batch.partition}: {wrong}", key=path)
        last = batch.partition
    return segment


def _records_fault(batch: RecordBatch) -> str | None:
    vnode = batch.partition % VNODE_COUNT
    for index, hashed in enumerate(batch.key_hashes):
        if hashed % VNODE_COUNT != vnode:
            return f"event {batch.first_offset + index}'s key is of vnode {hashed % VNODE_COUNT}"
    for index, record in enumerate(batch.records):
        view = memoryview(record)
        if not view or view[0] != _OPEN_BRACE or len(view) > EVENT_RECORD_BYTES_MAX:
            return f"event {batch.first_offset + index} is not a JSON object within the limit"
    return None
