"""Gated producers: the deterministic workload appended in stages a scenario opens one by one
(issue 7: "produces a known workload ... adds a fourth node, SIGKILLs the leader, SIGTERMs
another"), so that every fault lands while events are still flowing.

* `GatedEventLog` (the chaos test's integer log): `harness.workload.produce` appends the whole
  workload in one pass; `GatedEventLog` makes each of its appends wait until the scenario has
  allowed that many events (`allow`). A segment that would cross the allowed mark is cut there:
  its rest waits for the next stage.
* `GatedRecords` (the demo's record log, read by a job): the workload as records
  (`harness.workload.record_chunks`) sent through the public `Producer`, which waits at the
  allowed mark after flushing everything before it.

The events and their order are exactly those of an ungated run: the gate only delays appends,
so the log and the expected aggregates are the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_segments import SEGMENT_EVENTS_MAX
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.harness.workload import ProduceReport, Workload, produce, record_chunks
from laminar_cluster.store import ObjectStore

RECORD_PARTITIONS: Final = 256
RECORD_FLUSH_EVENTS_MAX: Final = 65_536
RECORD_FLUSH_TIMEOUT_S: Final = 60.0


class GatedEventLog(EventLog):
    """An `EventLog` whose appends wait for the gate; counts events appended."""

    def __init__(self, store: ObjectStore, *, clock: Clock) -> None:
        super().__init__(store, clock=clock)
        self.allowed = 0
        self.reserved = 0  # events of appends past the gate (started or done)
        self.appended = 0  # events of appends done
        self._gate = asyncio.Condition()

    async def allow(self, events: int) -> None:
        """Let appends through until `events` events in all (never lowers the mark)."""
        async with self._gate:
            self.allowed = max(self.allowed, events)
            self._gate.notify_all()

    async def append_batches(
        self, batches: Mapping[int, tuple[Sequence[int], Sequence[int]]], *, deadline: float
    ) -> dict[int, int]:
        """Append `batches` as soon as the gate allows, split into as many segments as the
        gate's marks ask (a segment never waits for more than the next mark)."""
        left = {p: (list(keys), list(values)) for p, (keys, values) in sorted(batches.items())}
        firsts: dict[int, int] = {}
        while left:
            async with within_deadline(self.clock, deadline, "produce gate"), self._gate:
                await self._gate.wait_for(lambda: self.reserved < self.allowed)
                piece = _take(left, self.allowed - self.reserved)
                events = sum(len(keys) for keys, _ in piece.values())
                self.reserved += events
            for partition, first in (
                await super().append_batches(piece, deadline=deadline)
            ).items():
                firsts.setdefault(partition, first)
            self.appended += events
        return firsts


def _take(
    left: dict[int, tuple[list[int], list[int]]], allowance: int
) -> dict[int, tuple[list[int], list[int]]]:
    """Up to `allowance` (> 0) events from the front of `left`, partition by partition (the
    last one cut), removed from `left`."""
    piece: dict[int, tuple[list[int], list[int]]] = {}
    for partition in list(left):
        keys, values = left[partition]
        take = min(len(keys), allowance)
        piece[partition] = (keys[:take], values[:take])
        allowance -= take
        if take == len(keys):
            del left[partition]
        else:
            left[partition] = (keys[take:], values[take:])
        if allowance == 0:
            break
    return piece


async def produce_gated(
    log: GatedEventLog,
    workload: Workload,
    *,
    deadline: float,
    batch_events: int = 2_000,
) -> ProduceReport:
    """Append `workload` through the gate of `log` (resuming after what the log holds)."""
    # Segments of a sixteenth of the workload at most: each stage lets several through.
    batch = max(1, min(batch_events, workload.events // 16))
    segment_events = max(batch, min(SEGMENT_EVENTS_MAX, workload.events // 16))
    return await produce(
        log, workload, batch_events=batch, deadline=deadline, segment_events=segment_events
    )


class GatedRecords:
    """The workload sent as records to the record log of `store` (`partitions` partitions)
    through a `Producer`, as far as the gate allows (module docstring). `appended` counts the
    events durable in the log."""

    def __init__(
        self, store: ObjectStore, *, clock: Clock, partitions: int = RECORD_PARTITIONS
    ) -> None:
        self.store, self.clock, self.partitions = store, clock, partitions
        self.allowed = 0
        self._producer: Producer | None = None
        self._gate = asyncio.Condition()

    @property
    def appended(self) -> int:
        """Events flushed durably so far."""
        return 0 if self._producer is None else self._producer.events_sent

    async def allow(self, events: int) -> None:
        """Let sends through until `events` events in all (never lowers the mark)."""
        async with self._gate:
            self.allowed = max(self.allowed, events)
            self._gate.notify_all()

    async def produce(self, workload: Workload, *, deadline: float) -> None:
        """Send every record of `workload`, waiting at each allowed mark (after flushing what
        came before it); return when all are durable. Segments hold up to a sixteenth of the
        workload, so each stage lets several through."""
        flush_events = max(1, min(RECORD_FLUSH_EVENTS_MAX, workload.events // 16))
        producer = Producer(
            self.store,
            partitions=self.partitions,
            clock=self.clock,
            flush_events=flush_events,
            timeout_s=RECORD_FLUSH_TIMEOUT_S,
        )
        self._producer = producer
        sent = 0
        async with producer:
            for records in record_chunks(workload):
                start = 0
                while start < len(records):
                    if sent >= self.allowed:
                        await producer.flush()
                        await self._wait_past(sent, deadline)
                    stop = min(len(records), start + self.allowed - sent)
                    for key, record in records[start:stop]:
                        await producer.send(key, record)
                    sent, start = sent + stop - start, stop

    async def _wait_past(self, sent: int, deadline: float) -> None:
        async with within_deadline(self.clock, deadline, "record producer gate"), self._gate:
            await self._gate.wait_for(lambda: self.allowed > sent)
