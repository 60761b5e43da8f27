"""The processing task of `StreamEngine` (see engine.py for the rules it serves).

Each turn of the loop restores the restoring vnodes (backing off after a failure, so a failing
restore does not starve the active vnodes), learns the log's partition count (once the producer
declared it), then reads up to `read_parallelism` partitions and applies the batches.
Each batch is applied synchronously and the loop yields after it (so renewals and checkpoint
work run between batches); before each batch it re-checks that intake is open and the
partition still stands where it was read: reads have no effects, so a read overtaken by a cut,
a gate, a drain or an adoption is dropped. Expected failures (`LaminarError`) are logged and
counted; the loop waits `retry_s` and goes on. Anything else is a bug and ends the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import CorruptRecord, LaminarError
from laminar_cluster.runtime.restoring import RestoredCuts, RestoreSource
from laminar_cluster.runtime.vnode_table import PendingRestore

if TYPE_CHECKING:
    from laminar_cluster.runtime.engine import StreamEngine

logger: Final = logging.getLogger(__name__)

RESTORE_BACKOFF_S_MAX: Final = 5.0

Events = tuple[Sequence[int], Sequence[int], int]


class EngineLoop:
    def __init__(self, engine: StreamEngine) -> None:
        self.engine = engine
        # A failed restore waits, doubling from retry_s up to RESTORE_BACKOFF_S_MAX, so it
        # neither starves the active vnodes nor floods the log; an absent layout waits retry_s.
        self._restore_after = 0.0
        self._restore_backoff_s = engine.config.retry_s
        self._partitions_after = 0.0

    async def run(self, shutdown: asyncio.Event) -> None:
        engine, config = self.engine, self.engine.config
        while not shutdown.is_set():
            try:
                worked = await self.step()
            except LaminarError as error:
                engine.counters.errors += 1
                engine.counters.last_error = str(error)
                logger.warning("engine step failed: %s", error)
                await engine.wait_change(config.retry_s)
                continue
            if not worked:
                await engine.wait_change(config.idle_s)

    async def step(self) -> bool:
        """One turn: restore (if due), learn the partition count (if due), process; False
        when there was nothing to do."""
        engine = self.engine
        clock, retry_s = engine.clock, engine.config.retry_s
        worked = False
        if engine.table.restoring and clock.monotonic() >= self._restore_after:
            try:
                worked = await self._restore()
            except LaminarError:
                self._restore_after = clock.monotonic() + self._restore_backoff_s
                self._restore_backoff_s = min(2 * self._restore_backoff_s, RESTORE_BACKOFF_S_MAX)
                raise
            self._restore_backoff_s = retry_s
        if not engine.partitions_known and clock.monotonic() >= self._partitions_after:
            self._partitions_after = clock.monotonic() + retry_s
            worked = await self._learn_partitions() or worked
        return await self._process() or worked

    async def _learn_partitions(self) -> bool:
        engine = self.engine
        deadline = engine.clock.monotonic() + engine.config.read_timeout_s
        partitions = await engine.log.partitions(deadline=deadline)
        if partitions is None:
            return False
        engine.table.set_partitions(partitions)
        engine.partitions_known = True
        engine.notify()
        return True

    async def _restore(self) -> bool:
        """Restore every restoring vnode, one `Restorer` call per source."""
        engine = self.engine
        pending = dict(engine.table.restoring)
        by_source: dict[RestoreSource, list[int]] = {}
        for vnode, restore in sorted(pending.items()):
            by_source.setdefault(restore.source, []).append(vnode)
        for source, vnodes in by_source.items():
            deadline = engine.clock.monotonic() + engine.config.restore_timeout_s
            cuts = await engine.restorer(source, tuple(vnodes), deadline=deadline)
            for vnode in vnodes:
                self._finish(vnode, pending[vnode], cuts)
        engine.notify()
        return True

    def _finish(self, vnode: int, restore: PendingRestore, cuts: RestoredCuts) -> None:
        engine = self.engine
        if engine.table.restoring.get(vnode) != restore:
            return  # the ownership moved on while the restore ran
        if vnode not in cuts:
            raise CorruptRecord(f"restore of vnode {vnode}: the restorer returned no cut for it")
        cut = cuts[vnode]
        state = None if cut is None else cut.state
        engine.processor.restore(vnode, state)
        offsets = {} if cut is None else dict(cut.offsets)
        engine.table.finish_restore(vnode, restore, offsets, empty=state is None)
        engine.counters.restores += 1

    async def _process(self) -> bool:
        engine = self.engine
        if not engine.intake_open():
            return False
        reads = engine.table.next_reads(engine.config.read_parallelism)
        if not reads:
            return False
        deadline = engine.clock.monotonic() + engine.config.read_timeout_s
        async with (
            within_deadline(engine.clock, deadline, "source read"),
            engine.rotation_lock.shared(),
        ):
            results = await self._read_all(reads, deadline)
            return await self._apply(reads, results)

    async def _read_all(
        self, reads: list[tuple[int, int]], deadline: float
    ) -> list[Events | LaminarError]:
        if len(reads) == 1:
            return [await self._read_one(*reads[0], deadline)]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._read_one(p, offset, deadline)) for p, offset in reads]
        return [task.result() for task in tasks]

    async def _read_one(
        self, partition: int, offset: int, deadline: float
    ) -> Events | LaminarError:
        engine = self.engine
        try:
            return await engine.log.read(
                partition, offset, engine.config.batch_events, deadline=deadline
            )
        except LaminarError as error:
            return error

    async def _apply(
        self, reads: list[tuple[int, int]], results: list[Events | LaminarError]
    ) -> bool:
        """Apply each batch whose partition still stands where it was read, one batch at a time:
        each is applied synchronously, then the loop yields, so the control plane (renewals,
        checkpoints) runs between batches however busy the engine is; intake is re-checked
        before every batch."""
        engine = self.engine
        table, processor, counters = engine.table, engine.processor, engine.counters
        applied, failure = False, None
        for (partition, start), result in zip(reads, results, strict=True):
            if not engine.intake_open():
                break
            if isinstance(result, LaminarError):
                failure = failure or result
                continue
            keys, values, next_offset = result
            vnode = table.vnode_of(partition)
            if table.offsets.get(partition) != start or vnode in table.paused:
                continue
            if next_offset != start + len(keys) or len(values) != len(keys):
                raise CorruptRecord(
                    f"partition {partition}: a read from offset {start} returned {len(keys)} "
                    f"keys, {len(values)} values and next offset {next_offset}"
                )
            table.offsets[partition] = next_offset
            if keys:
                table.untouched.discard(vnode)
                processor.process(vnode, keys, values)
                counters.events += len(keys)
                counters.batches += 1
                applied = True
                await engine.clock.sleep(0)
        if failure is not None:
            raise failure
        return applied
