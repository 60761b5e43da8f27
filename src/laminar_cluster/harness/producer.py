"""The demo's producer: the deterministic workload appended in stages the demo opens one by one
(issue 7: "produces a known workload ... adds a fourth node, SIGKILLs the leader, SIGTERMs
another"), so that every fault lands while events are still flowing.

`harness.workload.produce` appends the whole workload in one pass; `GatedEventLog` makes each
of its appends wait until the demo has allowed that many events (`allow`). The events and
their order are exactly those of an ungated run: the gate only delays appends, so the log and
the expected aggregates are the same. A segment that would cross the allowed mark is cut there:
its rest waits for the next stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_segments import SEGMENT_EVENTS_MAX
from laminar_cluster.harness.workload import ProduceReport, Workload, produce
from laminar_cluster.store import ObjectStore


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
