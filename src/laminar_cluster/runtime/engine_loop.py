"""The processing task of `StreamEngine` (`DataPlane.run`; see engine.py for the rules it
serves). The host restores vnodes in its own task (rebalance/engine/vnode_host.py).

Each turn of the loop learns the log's partition count (once the producer declared it), then
reads up to `read_parallelism` partitions and applies the batches, holding `intake.executing()`
(authority closure waits for it; a turn after an idle wait first polls the log's published
ends, one conditional GET, so a caught-up partition is listed only when it moved; idle waits
double from `idle_s` to `idle_max_s` while nothing is new, which bounds how late new events are
noticed). Each batch is applied synchronously and the loop yields after
it (so renewals and checkpoint work run between batches); before each batch it re-checks that
intake is open and the partition still stands where it was read: reads have no effects, so a
read overtaken by a cut, a gate, a drain or an adoption is dropped. Expected failures
(`LaminarError`) go to `intake.failed` (logged and counted); the loop waits `retry_s` and goes
on. Anything else is a bug and ends the task.

A turn that found nothing waits only once a whole round of the consumable partitions found
nothing (`_dry_reads`): a log with many partitions and few busy ones (a record log has 256) is
not read one `read_parallelism` slice per idle wait, which made a partition late in the round
wait tens of seconds to be read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import CorruptRecord, LaminarError
from laminar_cluster.rebalance.engine.data_plane import Intake
from laminar_cluster.runtime.engine_types import (
    BatchReader,
    EngineConfig,
    SourceBatch,
    SourceLog,
    StreamCounters,
)
from laminar_cluster.runtime.processor import Processor
from laminar_cluster.runtime.vnode_table import VnodeTable

logger: Final = logging.getLogger(__name__)


class EngineLoop:
    """Reads the log into the processor for the vnodes `table` holds; counts in `counters`."""

    def __init__(
        self,
        *,
        clock: Clock,
        log: SourceLog,
        read: BatchReader,
        processor: Processor,
        config: EngineConfig,
        table: VnodeTable,
        counters: StreamCounters,
        partitions_known: bool,
    ) -> None:
        self.clock, self.log, self.read, self.processor = clock, log, read, processor
        self.config, self.table, self.counters = config, table, counters
        self.partitions_known = partitions_known
        self._partitions_after = 0.0  # an absent layout is asked for again after retry_s
        self._idle_s = 0.0  # the last idle wait (0: the last step worked)
        self._dry_reads = 0  # partitions read since a batch was last applied
        self._poll_due = False  # poll the published ends before the next read (after a wait)

    async def run(self, intake: Intake, shutdown: asyncio.Event) -> None:
        config = self.config
        while not shutdown.is_set():
            try:
                worked = await self.step(intake)
            except LaminarError as error:
                intake.failed(error)
                await intake.changed(config.retry_s)
                continue
            if worked:
                self._idle_s = 0.0
                continue
            if 0 < self._dry_reads < len(self.table.consumable()):
                await self.clock.sleep(0)  # the rest of the round first, without waiting
                continue
            self._dry_reads = 0
            # Back off while nothing is new: each idle wait doubles, up to idle_max_s.
            self._idle_s = min(max(self._idle_s * 2, config.idle_s), config.idle_max_s)
            await intake.changed(self._idle_s)
            self._poll_due = True

    async def step(self, intake: Intake) -> bool:
        """One turn: learn the partition count (if due), process; False when there was
        nothing to do."""
        clock, retry_s = self.clock, self.config.retry_s
        worked = False
        if not self.partitions_known and clock.monotonic() >= self._partitions_after:
            self._partitions_after = clock.monotonic() + retry_s
            worked = await self._learn_partitions()
        return await self._process(intake) or worked

    async def _learn_partitions(self) -> bool:
        deadline = self.clock.monotonic() + self.config.read_timeout_s
        partitions = await self.log.partitions(deadline=deadline)
        if partitions is None:
            return False
        self.table.set_partitions(partitions)
        self.partitions_known = True
        return True

    async def _process(self, intake: Intake) -> bool:
        reads = self.table.next_reads(self.config.read_parallelism) if intake.open() else []
        if not reads:
            self._dry_reads = 0  # nothing to read at all: the run waits (no round to finish)
            return False
        deadline = self.clock.monotonic() + self.config.read_timeout_s
        if self._poll_due:  # after an idle wait: what moved? (reads list only what did)
            self._poll_due = False
            async with within_deadline(self.clock, deadline, "source ends"):
                await self.log.poll_ends(self.table.consumable(), deadline=deadline)
        async with within_deadline(self.clock, deadline, "source read"), intake.executing():
            results = await self._read_all(reads, deadline)
            applied = await self._apply(intake, reads, results)
        self._dry_reads = 0 if applied else self._dry_reads + len(reads)
        return applied

    async def _read_all(
        self, reads: list[tuple[int, int]], deadline: float
    ) -> list[SourceBatch | LaminarError]:
        if len(reads) == 1:
            return [await self._read_one(*reads[0], deadline)]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._read_one(p, offset, deadline)) for p, offset in reads]
        return [task.result() for task in tasks]

    async def _read_one(
        self, partition: int, offset: int, deadline: float
    ) -> SourceBatch | LaminarError:
        try:
            return await self.read(partition, offset, self.config.batch_events, deadline=deadline)
        except LaminarError as error:
            return error

    async def _apply(
        self,
        intake: Intake,
        reads: list[tuple[int, int]],
        results: list[SourceBatch | LaminarError],
    ) -> bool:
        """Apply each batch whose partition still stands where it was read, one batch at a time:
        each is applied synchronously, then the loop yields, so the control plane (renewals,
        checkpoints) runs between batches however busy the engine is; intake is re-checked
        before every batch."""
        table, processor, counters = self.table, self.processor, self.counters
        applied, failure = False, None
        for (partition, start), result in zip(reads, results, strict=True):
            if not intake.open():
                break
            if isinstance(result, LaminarError):
                failure = failure or result
                continue
            vnode = table.vnode_of(partition)
            if table.offsets.get(partition) != start or vnode in table.paused:
                continue
            if result.first_offset != start or result.next_offset < start:
                raise CorruptRecord(
                    f"partition {partition}: a read from offset {start} returned offsets "
                    f"{result.first_offset}..<{result.next_offset}"
                )
            count = result.next_offset - start
            if count:
                # The processor applies the whole batch or raises before the offset moves.
                table.untouched.discard(vnode)
                processor.process(vnode, partition, result)
                table.offsets[partition] = result.next_offset
                counters.events += count if result.events_count is None else result.events_count
                counters.batches += 1
                applied = True
                await self.clock.sleep(0)
        if failure is not None:
            raise failure
        return applied
