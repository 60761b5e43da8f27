"""The demo's gated producer (harness/producer.py): a segment that would cross the allowed mark
is cut there, and the log holds exactly what an ungated append writes."""

from __future__ import annotations

import asyncio

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.harness.producer import GatedEventLog
from laminar_cluster.store import open_store


def far() -> float:
    return RealClock().monotonic() + 60.0


def test_a_segment_crossing_the_mark_is_cut_there_and_the_rest_waits() -> None:
    async def main() -> None:
        store = open_store("memory://")
        log = GatedEventLog(store, clock=RealClock())
        batches = {p: (list(range(p * 10, p * 10 + 10)), [p] * 10) for p in range(3)}
        append = asyncio.create_task(log.append_batches(batches, deadline=far()))
        await log.allow(14)
        for _ in range(100):
            if log.appended == 14:
                break
            await asyncio.sleep(0.01)
        assert (log.appended, append.done()) == (14, False)  # 10 of p0 and 4 of p1, no more
        await log.allow(30)
        assert await append == {0: 0, 1: 0, 2: 0}
        assert len(await store.list("events/segment=")) == 2
        reader = EventLog(store)
        for partition, (keys, values) in batches.items():
            got = await reader.read(partition, 0, 100, deadline=far())
            assert got == (tuple(keys), tuple(values), 10)

    asyncio.run(main())
