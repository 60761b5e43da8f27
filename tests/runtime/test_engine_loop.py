"""`EngineLoop`: a turn that found nothing waits only once a whole round of the consumable
partitions found nothing, so a busy partition late in a 256-partition round is read in the
first round, not after one idle wait per `read_parallelism` slice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import LaminarError
from laminar_cluster.runtime.engine_loop import EngineLoop
from laminar_cluster.runtime.engine_types import (
    EngineConfig,
    StreamCounters,
    read_columns,
)
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.runtime.vnode_table import VnodeTable

PARTITIONS = 256
BUSY = 241


class _Log:
    """256 partitions; only `BUSY` holds events (three of them)."""

    def __init__(self) -> None:
        self.reads: list[int] = []

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[Sequence[int], Sequence[int], int]:
        self.reads.append(partition)
        if partition == BUSY and offset == 0:
            return (1, 2, 3), (10, 20, 30), 3
        return (), (), offset

    async def end_offset(self, partition: int, *, deadline: float) -> int:
        return 3 if partition == BUSY else 0

    async def partitions(self, *, deadline: float) -> int | None:
        return PARTITIONS

    async def poll_ends(self, partitions: Iterable[int], *, deadline: float) -> bool:
        return False

    async def known_end(self, partition: int, *, deadline: float) -> int:
        return await self.end_offset(partition, deadline=deadline)

    def caught_up(self, offsets: Mapping[int, int]) -> bool:
        return False


class _Intake:
    def __init__(self, shutdown: asyncio.Event, processor: KeyedAggregation) -> None:
        self.shutdown, self.processor, self.waits = shutdown, processor, 0

    def open(self) -> bool:
        return True

    @asynccontextmanager
    async def executing(self) -> AsyncIterator[None]:
        yield

    async def changed(self, timeout_s: float) -> None:
        self.waits += 1
        self.shutdown.set()  # the first idle wait ends the run: count what came before it

    def failed(self, error: LaminarError) -> None:
        raise error


def test_a_busy_partition_late_in_the_round_is_read_before_any_idle_wait() -> None:
    async def main() -> tuple[int, dict[int, tuple[int, int]], list[int]]:
        clock, log, processor = RealClock(), _Log(), KeyedAggregation()
        table = VnodeTable(PARTITIONS)
        for vnode in range(256):
            processor.restore(vnode, None)
            table.restore(vnode, {}, empty=True, vnode_count=256)
        config = EngineConfig(read_parallelism=8)
        loop = EngineLoop(
            clock=clock,
            log=log,
            read=read_columns(log),
            processor=processor,
            config=config,
            table=table,
            counters=StreamCounters(),
            partitions_known=True,
        )
        shutdown = asyncio.Event()
        intake = _Intake(shutdown, processor)
        await asyncio.wait_for(loop.run(intake, shutdown), timeout=30)
        return intake.waits, processor.totals(BUSY % 256), log.reads

    waits, totals, reads = asyncio.run(main())
    assert totals == {1: (1, 10), 2: (1, 20), 3: (1, 30)}  # read before the first idle wait
    assert waits == 1
    assert len(reads) <= 2 * PARTITIONS  # one round to find it, one dry round, then the wait


class _ClosingIntake(_Intake):
    """Open for the loop's first turn only (a gate closes intake after one slice was read)."""

    def __init__(self, shutdown: asyncio.Event, processor: KeyedAggregation) -> None:
        super().__init__(shutdown, processor)
        self.opens = 0

    def open(self) -> bool:
        self.opens += 1
        return self.opens <= 2  # the turn's check and its batch's re-check


def test_a_loop_whose_intake_closed_mid_round_waits_instead_of_spinning() -> None:
    async def main() -> tuple[int, int]:
        clock, log, processor = RealClock(), _Log(), KeyedAggregation()
        table = VnodeTable(PARTITIONS)
        for vnode in range(256):
            processor.restore(vnode, None)
            table.restore(vnode, {}, empty=True, vnode_count=256)
        loop = EngineLoop(
            clock=clock,
            log=log,
            read=read_columns(log),
            processor=processor,
            config=EngineConfig(read_parallelism=8),
            table=table,
            counters=StreamCounters(),
            partitions_known=True,
        )
        shutdown = asyncio.Event()
        intake = _ClosingIntake(shutdown, processor)
        await asyncio.wait_for(loop.run(intake, shutdown), timeout=10)
        return intake.waits, intake.opens

    waits, opens = asyncio.run(main())
    assert waits == 1  # a dry slice, then closed intake: the loop waits for a change
    assert opens < 10  # and did not turn round and round meanwhile
