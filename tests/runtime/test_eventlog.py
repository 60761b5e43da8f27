"""The partitioned event log (runtime/eventlog.py): append, read, contiguity, corruption, one
writer per partition, lost responses; on memory:// and file://."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import Contended, CorruptRecord, InvalidArgument, Refused
from laminar_cluster.runtime.eventlog import EventLog, partitions_of_vnode
from laminar_cluster.runtime.eventlog_batches import (
    EVENT_BATCH_EVENTS_MAX,
    encode_batch,
    event_batch_path,
    parse_event_batch_path,
    vnode_of_partition,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from laminar_cluster.store.faulty import FaultKind, FaultyStore

BACKENDS = pytest.mark.parametrize("backend", ["memory", "file"])


def open_backend(backend: str, tmp_path: Path) -> ObjectStore:
    return open_store("memory://" if backend == "memory" else f"file://{tmp_path}/s?fsync=false")


def far() -> float:
    return RealClock().monotonic() + 60.0


async def read_all(
    log: EventLog, partition: int, *, max_events: int = 1_000
) -> list[tuple[int, int]]:
    events: list[tuple[int, int]] = []
    offset = 0
    for _ in range(10_000):
        keys, values, offset = await log.read(partition, offset, max_events, deadline=far())
        if not keys:
            return events
        events.extend(zip(keys, values, strict=True))
    raise AssertionError("read did not reach the end")


@BACKENDS
def test_append_read_round_trip(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        log = EventLog(store)
        assert await log.end_offset(3, deadline=far()) == 0
        assert await log.read(3, 0, 10, deadline=far()) == ((), (), 0)
        assert await log.append(3, [1, 2, 3], [10, -20, 30], deadline=far()) == 0
        assert await log.append(3, [4, 5], [40, 50], deadline=far()) == 3
        assert await log.append(3, [2**64 - 1], [-(2**63)], deadline=far()) == 5
        assert await log.end_offset(3, deadline=far()) == 6
        # Batches are the named objects, contiguous from 0.
        keys = [meta.key for meta in await store.list("events/")]
        assert keys == [event_batch_path(3, 0), event_batch_path(3, 3), event_batch_path(3, 5)]
        assert keys[1] == "events/partition=00003/offset=00000000000000000003.json"
        # A fresh reader (no cache): everything, mid-batch, across batches, at the end.
        fresh = EventLog(store)
        assert await read_all(fresh, 3) == [
            (1, 10),
            (2, -20),
            (3, 30),
            (4, 40),
            (5, 50),
            (2**64 - 1, -(2**63)),
        ]
        assert await EventLog(store).read(3, 1, 3, deadline=far()) == ((2, 3, 4), (-20, 30, 40), 4)
        assert await fresh.read(3, 4, 1, deadline=far()) == ((5,), (50,), 5)
        assert await fresh.read(3, 6, 5, deadline=far()) == ((), (), 6)
        assert await read_all(EventLog(store), 3, max_events=1) == await read_all(fresh, 3)
        assert await fresh.end_offset(4, deadline=far()) == 0  # other partitions untouched

    asyncio.run(main())


@BACKENDS
def test_tail_reader_sees_new_batches(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        writer, reader = EventLog(store), EventLog(store)
        await writer.append(0, [1], [1], deadline=far())
        assert await reader.read(0, 0, 10, deadline=far()) == ((1,), (1,), 1)
        assert await reader.read(0, 1, 10, deadline=far()) == ((), (), 1)
        await writer.append(0, [2, 3], [2, 3], deadline=far())
        assert await reader.read(0, 1, 10, deadline=far()) == ((2, 3), (2, 3), 3)
        assert await reader.end_offset(0, deadline=far()) == 3

    asyncio.run(main())


@BACKENDS
def test_second_writer_is_contended(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        first, second = EventLog(store), EventLog(store)
        assert await first.append(7, [1], [1], deadline=far()) == 0
        assert await second.append(7, [2], [2], deadline=far()) == 1  # second learns the end
        # First still believes the end is 1 (its own last batch): its create conflicts.
        with pytest.raises(Contended):
            await first.append(7, [3], [3], deadline=far())
        # Contended means re-read: the next append finds the real end.
        assert await first.append(7, [3], [3], deadline=far()) == 2
        assert await read_all(EventLog(store), 7) == [(1, 1), (2, 2), (3, 3)]

    asyncio.run(main())


def test_lost_create_response_is_settled_by_read_back() -> None:
    async def main() -> None:
        clock = RealClock()
        store = FaultyStore(open_store("memory://"), clock=clock, seed=1)
        log = EventLog(store, clock=clock)
        store.fail_next(FaultKind.AFTER, op="put")  # applied, response lost
        assert await log.append(0, [1, 2], [3, 4], deadline=far()) == 0
        store.fail_next(FaultKind.BEFORE, op="put")  # not applied: retried
        store.fail_next(FaultKind.PHANTOM_CONFLICT, op="put")  # refused as a conflict: retried
        assert await log.append(0, [5], [6], deadline=far()) == 2
        store.fail_next(FaultKind.BEFORE, op="list")
        store.fail_next(FaultKind.BEFORE, op="get")
        assert await read_all(EventLog(store, clock=clock), 0) == [(1, 3), (2, 4), (5, 6)]

    asyncio.run(main())


async def seed_batches(store: ObjectStore, partition: int, batches: list[tuple[int, int]]) -> None:
    """Write batches (first offset, event count) by hand, bypassing the single-writer rule."""
    for first, count in batches:
        body = encode_batch(partition, first, tuple(range(count)), tuple(range(count)))
        await store.put(event_batch_path(partition, first), body, CREATE)


@BACKENDS
@pytest.mark.parametrize(
    ("batches", "offset"),
    [
        ([(0, 5), (10, 5)], 0),  # a gap: 5..10 missing
        ([(0, 5), (3, 5)], 0),  # an overlap
        ([(5, 5)], 0),  # the first batch does not start at 0
        ([(0, 5)], 6),  # an offset past the end
    ],
    ids=["gap", "overlap", "late-start", "past-end"],
)
def test_broken_contiguity_is_corrupt(
    backend: str, tmp_path: Path, batches: list[tuple[int, int]], offset: int
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        await seed_batches(store, 1, batches)
        with pytest.raises(CorruptRecord):
            await read_all_from(EventLog(store), 1, offset)

    asyncio.run(main())


async def read_all_from(log: EventLog, partition: int, offset: int) -> None:
    for _ in range(100):
        keys, _, offset = await log.read(partition, offset, 3, deadline=far())
        if not keys:
            return


@BACKENDS
def test_malformed_objects_are_corrupt(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        await seed_batches(store, 2, [(0, 2)])
        # A body that is not a batch, a batch claiming another offset, a foreign key.
        await store.put(event_batch_path(2, 2), b"not json", CREATE)
        with pytest.raises(CorruptRecord):
            await read_all(EventLog(store), 2)
        await store.put(event_batch_path(2, 2), encode_batch(2, 3, (1,), (1,)), OVERWRITE)
        with pytest.raises(CorruptRecord, match="holds partition 2 offset 3"):
            await read_all(EventLog(store), 2)
        await store.put(event_batch_path(2, 2), encode_batch(2, 2, (1,), (1,)), OVERWRITE)
        assert len(await read_all(EventLog(store), 2)) == 3
        await store.put("events/partition=00002/offset=3.json", b"{}", CREATE)
        with pytest.raises(CorruptRecord, match="not an event batch path"):
            await EventLog(store).end_offset(2, deadline=far())

    asyncio.run(main())


def test_listed_batch_that_vanished_is_corrupt() -> None:
    async def main() -> None:
        store = open_store("memory://")
        log = EventLog(store)
        await log.append(0, [1], [1], deadline=far())
        await log.append(0, [2], [2], deadline=far())
        reader = EventLog(store)
        assert await reader.end_offset(0, deadline=far()) == 2  # lists both, caches the last
        await store.delete(event_batch_path(0, 0))
        with pytest.raises(CorruptRecord, match="gone"):
            await reader.read(0, 0, 1, deadline=far())

    asyncio.run(main())


def test_invalid_appends_are_refused_before_writing() -> None:
    async def main() -> None:
        store = open_store("memory://")
        log = EventLog(store)
        for keys, values in [
            ([], []),
            ([1, 2], [1]),
            ([-1], [0]),
            ([2**64], [0]),
            ([0], [2**63]),
            ([0] * (EVENT_BATCH_EVENTS_MAX + 1), [0] * (EVENT_BATCH_EVENTS_MAX + 1)),
        ]:
            with pytest.raises(InvalidArgument):
                await log.append(0, keys, values, deadline=far())
        with pytest.raises(InvalidArgument):
            await log.append(65_536, [1], [1], deadline=far())
        with pytest.raises(InvalidArgument):
            await log.read(0, -1, 1, deadline=far())
        with pytest.raises(InvalidArgument):
            await log.read(0, 0, 0, deadline=far())
        assert await store.list("") == []

    asyncio.run(main())


def test_paths_and_vnodes() -> None:
    path = event_batch_path(12, 345)
    assert path == "events/partition=00012/offset=00000000000000000345.json"
    assert parse_event_batch_path(path) == (12, 345)
    for bad in [
        "events/partition=12/offset=00000000000000000345.json",
        "events/partition=00012/offset=00000000000000000345",
        "events/partition=99999/offset=00000000000000000345.json",
        "events/partition=00012/offset=99999999999999999999.json",
    ]:
        with pytest.raises(CorruptRecord):
            parse_event_batch_path(bad)
    assert partitions_of_vnode(3, 1_000) == [3, 259, 515, 771]
    assert partitions_of_vnode(255, 64) == []
    assert all(vnode_of_partition(p) == v for v in range(256) for p in partitions_of_vnode(v, 600))
    with pytest.raises(InvalidArgument):
        partitions_of_vnode(256, 64)


def test_declared_partitions() -> None:
    async def main() -> None:
        log = EventLog(open_store("memory://"))
        assert await log.partitions(deadline=far()) is None
        await log.declare_partitions(64, deadline=far())
        await log.declare_partitions(64, deadline=far())  # the same count again: a no-op
        assert await log.partitions(deadline=far()) == 64
        with pytest.raises(Refused):
            await log.declare_partitions(128, deadline=far())

    asyncio.run(main())


def test_read_one_million_events_quickly(tmp_path: Path) -> None:
    """1,000,000 events, 64 partitions, batches of 5,000 on file://: the read takes well under a
    second here (about 0.4 s); the bound is loose for a loaded machine."""
    partitions, per_partition, batch = 64, 15_625, 5_000

    async def main() -> float:
        url = f"file://{tmp_path}/s?fsync=false"
        writer = EventLog(open_store(url))
        keys = list(range(batch))

        async def fill(partition: int) -> None:
            for start in range(0, per_partition, batch):
                count = min(batch, per_partition - start)
                await writer.append(partition, keys[:count], keys[:count], deadline=far())

        async with asyncio.TaskGroup() as group:
            for partition in range(partitions):
                group.create_task(fill(partition))
        reader = EventLog(open_store(url))
        started = time.monotonic()
        total = 0
        for partition in range(partitions):
            offset = 0
            while True:
                got, _, offset = await reader.read(partition, offset, 10_000, deadline=far())
                if not got:
                    break
                total += len(got)
        assert total == partitions * per_partition
        return time.monotonic() - started

    elapsed_s = asyncio.run(main())
    print(f"read 1,000,000 events in {elapsed_s:.3f} s")
    assert elapsed_s < 3.0
