"""The deterministic workload, its producer and its expected aggregates (harness/workload.py)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.errors import InvalidArgument, Refused
from laminar_cluster.harness.workload import (
    Workload,
    chunks,
    expected_aggregates,
    partition_counts,
    produce,
)
from laminar_cluster.store import open_store


def far() -> float:
    return RealClock().monotonic() + 120.0


def events_of(workload: Workload) -> list[tuple[int, int, int]]:
    """(partition, key, value) of every event, in stream order."""
    return [
        event
        for chunk in chunks(workload)
        for event in zip(chunk.partitions, chunk.keys, chunk.values, strict=True)
    ]


async def log_contents(log: EventLog, partitions: int) -> dict[int, list[tuple[int, int]]]:
    contents: dict[int, list[tuple[int, int]]] = {}
    for partition in range(partitions):
        events, offset = [], 0
        while True:
            keys, values, offset = await log.read(partition, offset, 4_096, deadline=far())
            if not keys:
                break
            events.extend(zip(keys, values, strict=True))
        contents[partition] = events
    return contents


def test_workload_is_deterministic_and_pinned() -> None:
    workload = Workload(seed=42, events=200_000, partitions=64, keys=10_000)
    assert events_of(workload) == events_of(Workload(42, 200_000, 64, 10_000))
    assert events_of(workload) != events_of(Workload(43, 200_000, 64, 10_000))
    # The stream does not depend on its length: a shorter workload is a prefix.
    assert events_of(Workload(42, 70_000, 64, 10_000)) == events_of(workload)[:70_000]
    # Pinned: the generator is SHAKE-256 and must not change between versions or platforms.
    assert events_of(Workload(1, 4, 64, 10_000)) == [
        (48, 3613, -15),
        (1, 3284, 182),
        (56, 2226, -21),
        (57, 8183, 20),
    ]


def test_workload_shape() -> None:
    workload = Workload(seed=5, events=100_000, partitions=64, keys=1_000)
    events = events_of(workload)
    assert len(events) == 100_000
    assert {p for p, _, _ in events} == set(range(64))
    assert {k for _, k, _ in events} == set(range(1_000))
    assert min(v for _, _, v in events) == -64 and max(v for _, _, v in events) == 191
    counts = Counter(p for p, _, _ in events)
    assert max(counts.values()) < 1.2 * min(counts.values())  # hash-spread
    assert partition_counts(workload) == [counts[p] for p in range(64)]
    for bad in [(-1, 1, 1, 1), (0, -1, 1, 1), (0, 1, 0, 1), (0, 1, 1, 0), (0, 1, 65_537, 1)]:
        with pytest.raises(InvalidArgument):
            Workload(*bad)


def test_expected_aggregates_fold_the_generator() -> None:
    workload = Workload(seed=9, events=50_000, partitions=8, keys=300)
    expected: dict[int, tuple[int, int]] = {}
    for _, key, value in events_of(workload):
        count, total = expected.get(key, (0, 0))
        expected[key] = (count + 1, total + value)
    assert expected_aggregates(workload) == expected
    assert sum(count for count, _ in expected.values()) == 50_000
    assert expected_aggregates(Workload(9, 0, 8, 300)) == {}


def test_produce_writes_each_partition_in_order() -> None:
    async def main() -> None:
        workload = Workload(seed=3, events=30_000, partitions=16, keys=500)
        log = EventLog(open_store("memory://"))
        seen: list[tuple[int, int]] = []
        report = await produce(
            log,
            workload,
            batch_events=700,
            deadline=far(),
            progress=lambda done, total: seen.append((done, total)),
        )
        assert (report.appended, report.skipped) == (30_000, 0)
        assert seen[-1] == (30_000, 30_000)
        assert [done for done, _ in seen] == sorted(done for done, _ in seen)
        assert await log.partitions(deadline=far()) == 16
        contents = await log_contents(EventLog(log.store), 16)
        for partition in range(16):
            assert contents[partition] == [
                (key, value) for p, key, value in events_of(workload) if p == partition
            ]
        # Batches hold at most batch_events events, and a segment one batch of each of as many
        # partitions as fit: one progress report per segment.
        segments = await log.store.list("events/segment=")
        assert len(segments) == len(seen) < report.batches
        assert report.batches >= 30_000 // 700

    asyncio.run(main())


def test_produce_resumes_and_refuses_a_longer_log() -> None:
    async def main() -> None:
        store = open_store("memory://")
        short, full = Workload(11, 12_345, 8, 100), Workload(11, 40_000, 8, 100)
        await produce(EventLog(store), short, batch_events=1_000, deadline=far())
        # A rerun of the longer workload appends only what is missing (its prefix is there).
        report = await produce(EventLog(store), full, batch_events=1_000, deadline=far())
        assert (report.appended, report.skipped) == (40_000 - 12_345, 12_345)
        again = await produce(EventLog(store), full, batch_events=1_000, deadline=far())
        assert (again.appended, again.skipped, again.batches) == (0, 40_000, 0)
        contents = await log_contents(EventLog(store), 8)
        folded: dict[int, tuple[int, int]] = {}
        for events in contents.values():
            for key, value in events:
                count, total = folded.get(key, (0, 0))
                folded[key] = (count + 1, total + value)
        assert folded == expected_aggregates(full)
        with pytest.raises(Refused):
            await produce(EventLog(store), short, batch_events=1_000, deadline=far())
        with pytest.raises(Refused):  # another partition count
            await produce(EventLog(store), Workload(11, 10, 9, 100), batch_events=5, deadline=far())
        with pytest.raises(InvalidArgument):
            await produce(EventLog(store), full, batch_events=0, deadline=far())

    asyncio.run(main())
