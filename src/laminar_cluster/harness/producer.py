"""The demo's producer: the deterministic workload appended in stages the demo opens one by one
(issue 7: "produces a known workload ... adds a fourth node, SIGKILLs the leader, SIGTERMs
another"), so that every fault lands while events are still flowing.

`harness.workload.produce` appends the whole workload in one pass; `GatedEventLog` makes each
of its appends wait until the demo has allowed that many events (`allow`). The events and
their order are exactly those of an ungated run: the gate only delays appends, so the log and
the expected aggregates are the same. A batch that would cross the allowed mark waits whole
for the next stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.harness.workload import ProduceReport, Workload, produce
from laminar_cluster.runtime.eventlog import EventLog
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

    async def append(
        self, partition: int, keys: Sequence[int], values: Sequence[int], *, deadline: float
    ) -> int:
        async with within_deadline(self.clock, deadline, "produce gate"), self._gate:
            await self._gate.wait_for(lambda: self.reserved + len(keys) <= self.allowed)
            self.reserved += len(keys)
        first = await super().append(partition, keys, values, deadline=deadline)
        self.appended += len(keys)
        return first


async def produce_gated(
    log: GatedEventLog,
    workload: Workload,
    *,
    deadline: float,
    batch_events: int = 2_000,
    concurrency: int = 32,
) -> ProduceReport:
    """Append `workload` through the gate of `log` (resuming after what the log holds)."""
    return await produce(
        log, workload, batch_events=batch_events, deadline=deadline, concurrency=concurrency
    )
