"""A deterministic workload for the event log, its producer and its expected aggregates
(issue 7: "produces a known workload ... checks the committed output against an independent
computation of the expected aggregates").

Event i of the workload `(seed, events, partitions, keys)` is drawn from the 64-bit word
`w = words[i]`, where the words are SHAKE-256 output read as little-endian u64: chunk c (events
c * 65,536 ..< (c + 1) * 65,536) is `shake_256(b"laminar-cluster workload v1" || u64le(seed) ||
u64le(c))`. Then

* key = (w & 0xFFFF_FFFF) % keys,
* partition = ((w >> 32) & 0xFF_FFFF) % partitions (independent bits: a hash spread),
* value = (w >> 56) - 64, in -64..=191.

The stream depends only on the seed (not on `events`), so a longer workload extends a shorter
one, and it is the same on every platform and Python version. Within a partition, events keep
their order in the stream. `expected_aggregates` folds the same words in plain Python, without
the log; `produce` appends each partition's events in order, batch by batch, resuming after
whatever a partition already holds (a rerun after a crash completes the workload without
duplicates; a partition holding more events than the workload gives it is Refused).
"""

from __future__ import annotations

import array
import collections
import hashlib
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_segments import (
    EVENT_BATCH_EVENTS_MAX,
    EVENT_LOG_PARTITIONS_MAX,
    SEGMENT_EVENTS_MAX,
)
from laminar_cluster.errors import InvalidArgument, Refused

CHUNK_EVENTS: Final = 65_536
WORKLOAD_EVENTS_MAX: Final = 2**40
WORKLOAD_KEYS_MAX: Final = 2**32
VALUE_BIAS: Final = 64
EVENT_TIME_STEP_MS: Final = 10
_DOMAIN: Final = b"laminar-cluster workload v1"

Aggregates = dict[int, tuple[int, int]]  # key -> (count, sum)
Progress = Callable[[int, int], None]  # (events written so far, events in the workload)
KeyedRecord = tuple[int, dict[str, int]]  # (key, {"key": k, "value": v, "ts_ms": t})


@dataclass(frozen=True, slots=True)
class Workload:
    seed: int
    events: int
    partitions: int
    keys: int

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**64:
            raise InvalidArgument(f"workload seed {self.seed} is outside the u64 range")
        if not 0 <= self.events <= WORKLOAD_EVENTS_MAX:
            raise InvalidArgument(f"workload of {self.events} events; allowed 0..={2**40}")
        if not 1 <= self.partitions <= EVENT_LOG_PARTITIONS_MAX:
            raise InvalidArgument(
                f"workload of {self.partitions} partitions; allowed 1..={EVENT_LOG_PARTITIONS_MAX}"
            )
        if not 1 <= self.keys <= WORKLOAD_KEYS_MAX:
            raise InvalidArgument(f"workload of {self.keys} keys; allowed 1..={2**32}")


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive events of the stream, columnar."""

    partitions: list[int]
    keys: list[int]
    values: list[int]


@dataclass(frozen=True, slots=True)
class ProduceReport:
    appended: int  # events this call appended
    skipped: int  # events already in the log (a resumed run)
    batches: int


def _words(seed: int, chunk: int, count: int) -> array.array[int]:
    digest = hashlib.shake_256(_DOMAIN + struct.pack("<QQ", seed, chunk)).digest(8 * count)
    words = array.array("Q", digest)
    if sys.byteorder == "big":
        words.byteswap()
    return words


def chunks(workload: Workload) -> Iterator[Chunk]:
    """The workload's events in stream order, CHUNK_EVENTS at a time."""
    keys, partitions = workload.keys, workload.partitions
    for chunk, start in enumerate(range(0, workload.events, CHUNK_EVENTS)):
        words = _words(workload.seed, chunk, min(CHUNK_EVENTS, workload.events - start))
        yield Chunk(
            partitions=[((w >> 32) & 0xFF_FFFF) % partitions for w in words],
            keys=[(w & 0xFFFF_FFFF) % keys for w in words],
            values=[(w >> 56) - VALUE_BIAS for w in words],
        )


def event_time_ms(offset_in_partition: int) -> int:
    """The event time of a workload partition's event at `offset_in_partition` (from 0):
    `offset_in_partition * EVENT_TIME_STEP_MS`, the rule of the record log and Bytewax's input."""
    return offset_in_partition * EVENT_TIME_STEP_MS


def record_chunks(workload: Workload) -> Iterator[list[KeyedRecord]]:
    """The workload's events as keyed records `{"key": k, "value": v, "ts_ms": t}` (`t` by
    `event_time_ms` over the workload's partitions), in stream order, a chunk at a time."""
    offsets = [0] * workload.partitions
    for chunk in chunks(workload):
        records: list[KeyedRecord] = []
        for partition, key, value in zip(chunk.partitions, chunk.keys, chunk.values, strict=True):
            ts_ms = event_time_ms(offsets[partition])
            offsets[partition] += 1
            records.append((key, {"key": key, "value": value, "ts_ms": ts_ms}))
        yield records


def expected_aggregates(workload: Workload) -> Aggregates:
    """Count and sum per key over the whole workload, straight from the generator."""
    counts: collections.Counter[int] = collections.Counter()
    sums: collections.defaultdict[int, int] = collections.defaultdict(int)
    for chunk in chunks(workload):
        counts.update(chunk.keys)
        for key, value in zip(chunk.keys, chunk.values, strict=True):
            sums[key] += value
    return {key: (counts[key], sums[key]) for key in sorted(counts)}


def partition_counts(workload: Workload) -> list[int]:
    """How many events the workload gives each partition."""
    counts = [0] * workload.partitions
    for chunk in chunks(workload):
        for partition in chunk.partitions:
            counts[partition] += 1
    return counts


async def produce(
    log: EventLog,
    workload: Workload,
    *,
    batch_events: int,
    deadline: float,
    progress: Progress | None = None,
    segment_events: int = SEGMENT_EVENTS_MAX,
) -> ProduceReport:
    """Append the workload to `log`: each partition's events in order, in batches of up to
    `batch_events`, as segments of up to `segment_events` events (one batch per partition
    each). Resumes after what each partition already holds; Refused if a partition holds more
    than the workload gives it."""
    if not 1 <= batch_events <= EVENT_BATCH_EVENTS_MAX:
        raise InvalidArgument(
            f"batch of {batch_events} events; allowed 1..={EVENT_BATCH_EVENTS_MAX}"
        )
    if not batch_events <= segment_events <= SEGMENT_EVENTS_MAX:
        raise InvalidArgument(
            f"segments of {segment_events} events; allowed {batch_events} (the batch)..="
            f"{SEGMENT_EVENTS_MAX}"
        )
    await log.declare_partitions(workload.partitions, deadline=deadline)
    # A producer that died between a segment and its index left the index behind: recover
    # finds and publishes what it wrote.
    ends = await log.recover(range(workload.partitions), deadline=deadline)
    skip = [ends[partition] for partition in range(workload.partitions)]
    if any(skip):
        for partition, (held, given) in enumerate(
            zip(skip, partition_counts(workload), strict=True)
        ):
            if held > given:
                raise Refused(
                    f"event log partition {partition} holds {held} events; workload seed "
                    f"{workload.seed} gives it {given}"
                )
    writer = _Writer(log, workload, (batch_events, segment_events), deadline, progress)
    writer.written = sum(skip)
    pending_keys: list[list[int]] = [[] for _ in range(workload.partitions)]
    pending_values: list[list[int]] = [[] for _ in range(workload.partitions)]
    buffered = 0
    flush_at = max(batch_events * workload.partitions, CHUNK_EVENTS)
    for chunk in chunks(workload):
        for partition, key, value in zip(chunk.partitions, chunk.keys, chunk.values, strict=True):
            if skip[partition]:
                skip[partition] -= 1
                continue
            pending_keys[partition].append(key)
            pending_values[partition].append(value)
            buffered += 1
        if buffered >= flush_at:
            buffered = await writer.flush(pending_keys, pending_values, final=False)
    await writer.flush(pending_keys, pending_values, final=True)
    return ProduceReport(
        appended=writer.appended, skipped=writer.written - writer.appended, batches=writer.batches
    )


class _Writer:
    """Appends the buffered events as segments: each a batch of up to `batch_events` of as
    many partitions as fit in `segment_events` events."""

    def __init__(
        self,
        log: EventLog,
        workload: Workload,
        sizes: tuple[int, int],  # batch_events, segment_events
        deadline: float,
        progress: Progress | None,
    ) -> None:
        self.log, self.workload = log, workload
        self.batch_events, self.segment_events = sizes
        self.deadline, self.progress = deadline, progress
        self.written = self.appended = self.batches = 0

    async def flush(self, keys: list[list[int]], values: list[list[int]], *, final: bool) -> int:
        """Append every full batch (every batch, if `final`); the events left buffered."""
        while True:
            segment: dict[int, tuple[list[int], list[int]]] = {}
            held = 0
            for partition in range(self.workload.partitions):
                take = min(len(keys[partition]), self.batch_events)
                if take == 0 or (take < self.batch_events and not final):
                    continue
                if held + take > self.segment_events:
                    break
                segment[partition] = (keys[partition][:take], values[partition][:take])
                del keys[partition][:take], values[partition][:take]
                held += take
            if not segment:
                return sum(len(partition_keys) for partition_keys in keys)
            await self.log.append_batches(segment, deadline=self.deadline)
            self.written += held
            self.appended += held
            self.batches += len(segment)
            if self.progress is not None:
                self.progress(self.written, self.workload.events)
