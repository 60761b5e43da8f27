"""Objects of the event log: batch paths, the `EventBatch` record and the layout record
(DC §3.1, DC §3.7: a Kafka-like partitioned log, partition p read by the owner of
vnode p % 256).

| path | record | write mode | writer |
| --- | --- | --- | --- |
| `events/partition={p:05}/offset={first:020}.json` | `EventBatch` | create-only | the producer |
| `events/layout.json` | `EventLogLayout` | create-only | the producer |

A batch is columnar: event i has key `keys[i]`, value `values[i]` and offset
`first_offset + i`. Batches of one partition are contiguous: the next one starts where the
previous one ended, from offset 0. Parsers re-format the parsed path and compare.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.codec import I64, U32, U64, Record, decode, encode_checked
from laminar_cluster.errors import CorruptRecord, InvalidArgument

EVENTS_PREFIX: Final = "events/"
LAYOUT_PATH: Final = "events/layout.json"
EVENT_LOG_PARTITIONS_MAX: Final = 65_536  # paths hold 5 digits
EVENT_BATCH_EVENTS_MAX: Final = 65_536
# 65,536 events of a 20-digit key and a 20-character value, with separators, fit in 2.7 MB.
EVENT_BATCH_BYTES_MAX: Final = 4 * 1024 * 1024
EVENT_LOG_LAYOUT_BYTES_MAX: Final = 256
U64_MAX: Final = 2**64 - 1

_BATCH = re.compile(r"events/partition=([0-9]{5})/offset=([0-9]{20})\.json")


class EventBatch(Record):
    """Events `first_offset ..< first_offset + len(keys)` of one partition, columnar."""

    version: Literal[1]
    partition: U32
    first_offset: U64
    keys: tuple[U64, ...]
    values: tuple[I64, ...]


class EventLogLayout(Record):
    """How many partitions the log has (written once by the producer; readers may check)."""

    version: Literal[1]
    partitions: U32


def check_partition(partition: int) -> None:
    if not 0 <= partition < EVENT_LOG_PARTITIONS_MAX:
        raise InvalidArgument(
            f"event log partition {partition} is outside 0..<{EVENT_LOG_PARTITIONS_MAX}"
        )


def partition_prefix(partition: int) -> str:
    check_partition(partition)
    return f"{EVENTS_PREFIX}partition={partition:05d}/"


def event_batch_path(partition: int, first_offset: int) -> str:
    if not 0 <= first_offset <= U64_MAX:
        raise InvalidArgument(f"event log offset {first_offset} is outside the u64 range")
    return f"{partition_prefix(partition)}offset={first_offset:020d}.json"


def parse_event_batch_path(path: str) -> tuple[int, int]:
    """(partition, first_offset) of a listed batch path; CorruptRecord if not canonical."""
    match = _BATCH.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not an event batch path", key=path)
    partition, first_offset = int(match.group(1)), int(match.group(2))
    if (
        partition >= EVENT_LOG_PARTITIONS_MAX
        or first_offset > U64_MAX
        or event_batch_path(partition, first_offset) != path
    ):
        raise CorruptRecord(f"{path}: event batch path is not canonical", key=path)
    return partition, first_offset


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


def encode_batch(
    partition: int, first_offset: int, keys: tuple[int, ...], values: tuple[int, ...]
) -> bytes:
    """The canonical bytes of one batch, checked (1..EVENT_BATCH_EVENTS_MAX events, u64 keys,
    i64 values, equal columns); InvalidArgument otherwise."""
    path = event_batch_path(partition, first_offset)
    if len(keys) != len(values):
        raise InvalidArgument(f"{path}: {len(keys)} keys but {len(values)} values")
    if not 1 <= len(keys) <= EVENT_BATCH_EVENTS_MAX:
        raise InvalidArgument(
            f"{path}: batch holds {len(keys)} events; allowed 1..={EVENT_BATCH_EVENTS_MAX}"
        )
    if first_offset + len(keys) > U64_MAX:
        raise InvalidArgument(f"{path}: batch would end past the u64 offset range")
    batch = EventBatch(
        version=1, partition=partition, first_offset=first_offset, keys=keys, values=values
    )
    return encode_checked(batch, what=path, max_bytes=EVENT_BATCH_BYTES_MAX)


def decode_batch(path: str, body: bytes) -> EventBatch:
    """The batch stored at `path`, checked against its path; CorruptRecord otherwise."""
    partition, first_offset = parse_event_batch_path(path)
    batch = decode(body, EventBatch, key=path, max_bytes=EVENT_BATCH_BYTES_MAX)
    if (batch.partition, batch.first_offset) != (partition, first_offset):
        raise CorruptRecord(
            f"{path}: holds partition {batch.partition} offset {batch.first_offset}", key=path
        )
    if len(batch.keys) != len(batch.values) or not batch.keys:
        raise CorruptRecord(
            f"{path}: {len(batch.keys)} keys and {len(batch.values)} values", key=path
        )
    return batch


def encode_layout(partitions: int) -> bytes:
    if not 1 <= partitions <= EVENT_LOG_PARTITIONS_MAX:
        raise InvalidArgument(
            f"partition count {partitions} is outside 1..={EVENT_LOG_PARTITIONS_MAX}"
        )
    layout = EventLogLayout(version=1, partitions=partitions)
    return encode_checked(layout, what=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX)


def decode_layout(body: bytes) -> int:
    layout = decode(body, EventLogLayout, key=LAYOUT_PATH, max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX)
    if not 1 <= layout.partitions <= EVENT_LOG_PARTITIONS_MAX:
        raise CorruptRecord(
            f"{LAYOUT_PATH}: partition count {layout.partitions} is outside "
            f"1..={EVENT_LOG_PARTITIONS_MAX}",
            key=LAYOUT_PATH,
        )
    return layout.partitions
