"""The exactly-once comparison and the gated producer (harness.exactly_once, harness.producer)
on memory://: a lost, a duplicated and a wrong-sum key are each found and named; the gate lets
exactly the allowed events through and the log then equals an ungated run; the demo's job check
takes each key's newest running total."""

from __future__ import annotations

import asyncio

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.harness.exactly_once import (
    check_exactly_once,
    check_job_exactly_once,
    compare,
    newest_totals,
)
from laminar_cluster.harness.producer import GatedEventLog, produce_gated
from laminar_cluster.harness.workload import Workload, expected_aggregates, produce
from laminar_cluster.jobs import DEAD_LETTER, MAIN, Emit
from laminar_cluster.store import open_store


def test_compare_names_lost_duplicated_and_wrong_sum_keys() -> None:
    expected = {1: (3, 30), 2: (2, 5), 3: (1, -4), 4: (1, 1)}
    committed = {1: (3, 30), 2: (3, 7), 3: (1, -3), 5: (1, 9)}
    lost, duplicated, wrong, wrong_keys = compare(committed, expected)
    assert wrong_keys == 4
    assert [w.key for w in wrong] == [2, 3, 4, 5]
    assert lost == 1  # key 4
    assert duplicated == 2  # key 2 once more, key 5 never expected
    assert "key 2: committed count 3 sum 7, expected count 2 sum 5" in wrong[0].describe()
    assert compare(expected, expected) == (0, 0, [], 0)


def test_gated_producer_lets_through_only_what_is_allowed() -> None:
    async def main() -> None:
        clock = RealClock()
        workload = Workload(seed=3, events=6_000, partitions=4, keys=50)
        gated_store, plain_store = open_store("memory://"), open_store("memory://")
        log = GatedEventLog(gated_store, clock=clock)
        deadline = clock.monotonic() + 30
        async with asyncio.TaskGroup() as group:
            group.create_task(produce_gated(log, workload, deadline=deadline, batch_events=100))
            await log.allow(2_000)
            for _ in range(3_000):  # every partition's last batch may wait at the gate
                if log.appended >= 2_000 - 4 * 100:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert log.appended <= 2_000
            await log.allow(workload.events)
        assert log.appended == workload.events
        await produce(
            EventLog(plain_store, clock=clock), workload, batch_events=100, deadline=deadline
        )
        for partition in range(workload.partitions):
            ungated = await EventLog(plain_store, clock=clock).read(
                partition, 0, 10_000, deadline=deadline
            )
            assert (
                await EventLog(gated_store, clock=clock).read(
                    partition, 0, 10_000, deadline=deadline
                )
                == ungated
            )

    asyncio.run(main())


def test_check_of_an_empty_store_reports_every_event_lost() -> None:
    async def main() -> None:
        clock = RealClock()
        workload = Workload(seed=5, events=500, partitions=2, keys=20)
        result = await check_exactly_once(
            open_store("memory://"), clock, workload, deadline=clock.monotonic() + 30
        )
        assert not result.passed
        assert result.lost == 500 and result.duplicated == 0 and result.committed_events == 0
        assert result.wrong_keys == len(expected_aggregates(workload))
        assert result.describe().startswith("NOT exactly once")

    asyncio.run(main())


def test_job_totals_are_each_keys_newest_main_record() -> None:
    """Running totals: a key's later record replaces its earlier one (a sum of them would count
    the key's events twice); other streams are not totals."""
    emits = [
        Emit(MAIN, {"key": 2, "count": 1, "sum": 5}),
        Emit(MAIN, {"key": 1, "count": 1, "sum": -3}),
        Emit(DEAD_LETTER, {"key": 1, "count": 9, "sum": 9}),
        Emit(MAIN, {"key": 2, "count": 3, "sum": 9}),
    ]
    totals = newest_totals(emits)
    assert totals == {1: (1, -3), 2: (3, 9)}
    assert list(totals) == [1, 2]


def test_job_check_of_an_empty_store_reports_every_event_lost() -> None:
    async def main() -> None:
        clock = RealClock()
        workload = Workload(seed=5, events=500, partitions=2, keys=20)
        result = await check_job_exactly_once(
            open_store("memory://"), clock, workload, deadline=clock.monotonic() + 30
        )
        assert not result.passed
        assert result.lost == 500 and result.duplicated == 0 and result.committed_events == 0
        assert result.wrong_keys == len(expected_aggregates(workload))

    asyncio.run(main())
