"""The gated producers (harness/producer.py): a segment of the integer log that would cross the
allowed mark is cut there, and the log holds exactly what an ungated append writes; the demo's
record producer stops at the allowed mark with everything before it durable, and the record log
then holds every workload record in its key's partition, in stream order."""

from __future__ import annotations

import asyncio

import msgspec

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import partition_of_key
from laminar_cluster.harness.producer import RECORD_PARTITIONS, GatedEventLog, GatedRecords
from laminar_cluster.harness.workload import Workload, record_chunks
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


def test_gated_records_stop_at_the_mark_then_hold_the_workload_by_key_in_order() -> None:
    async def main() -> None:
        store = open_store("memory://")
        workload = Workload(seed=3, events=6_000, partitions=4, keys=50)
        gated = GatedRecords(store, clock=RealClock())
        async with asyncio.TaskGroup() as group:
            produce = group.create_task(gated.produce(workload, deadline=far()))
            await gated.allow(2_500)
            for _ in range(300):
                if gated.appended >= 2_500:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert (gated.appended, produce.done()) == (2_500, False)  # flushed, then waits
            await gated.allow(workload.events)
        assert gated.appended == workload.events
        expected: dict[int, list[dict[str, int]]] = {}
        for records in record_chunks(workload):
            for key, record in records:
                expected.setdefault(partition_of_key(key, RECORD_PARTITIONS), []).append(record)
        log = EventLog(store)
        assert await log.partitions(deadline=far()) == RECORD_PARTITIONS
        for partition in range(RECORD_PARTITIONS):
            got, _ = await log.read_records(partition, 0, 10_000, deadline=far())
            assert [msgspec.json.decode(event) for event in got] == expected.get(partition, [])

    asyncio.run(main())
