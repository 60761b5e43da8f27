"""The partitioned event log (connectors/eventlog*.py, DC §3.7): segments, append and read,
contiguity, corruption, one writer per partition, lost responses, layout 1 refused; on
memory:// and file://."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog, partitions_of_vnode
from laminar_cluster.connectors.eventlog_ends import publish_shard
from laminar_cluster.connectors.eventlog_segments import (
    EVENT_BATCH_EVENTS_MAX,
    LAYOUT_PATH,
    SEGMENT_EVENTS_MAX,
    SegmentBatch,
    encode_segment,
    parse_segment_path,
    segment_path,
    vnode_of_partition,
)
from laminar_cluster.errors import Contended, CorruptRecord, InvalidArgument, Refused
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.faulty import FaultKind, FaultyStore

BACKENDS = pytest.mark.parametrize("backend", ["memory", "file"])


def open_backend(backend: str, tmp_path: Path) -> ObjectStore:
    return open_store("memory://" if backend == "memory" else f"file://{tmp_path}/s?fsync=false")


def far() -> float:
    return RealClock().monotonic() + 60.0


async def read_all(
    log: EventLog, partition: int, *, max_events: int = 1_000, offset: int = 0
) -> list[tuple[int, int]]:
    events: list[tuple[int, int]] = []
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
        assert await log.append_batches(
            {3: ([4, 5], [40, 50]), 9: ([7], [70])}, deadline=far()
        ) == {3: 3, 9: 0}
        assert await log.append(3, [2**64 - 1], [-(2**63)], deadline=far()) == 5
        assert await log.end_offset(3, deadline=far()) == 6
        # One object per append, whatever the partitions it holds, numbered from 0.
        keys = [meta.key for meta in await store.list("events/")]
        assert keys == [segment_path(0), segment_path(1), segment_path(2)]
        assert keys[1] == "events/segment=00000000000000000001.json"
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
        assert await EventLog(store).read(3, 4, 1, deadline=far()) == ((5,), (50,), 5)
        assert await fresh.read(3, 6, 5, deadline=far()) == ((), (), 6)
        assert await read_all(EventLog(store), 3, max_events=1) == await read_all(fresh, 3)
        assert await read_all(fresh, 9) == [(7, 70)]
        assert await fresh.end_offset(4, deadline=far()) == 0  # other partitions untouched

    asyncio.run(main())


@BACKENDS
def test_a_reader_starting_mid_log_links_back_only_as_far_as_it_reads(
    backend: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        writer = EventLog(store)
        for first in range(0, 10, 2):
            await writer.append(5, [first, first + 1], [0, 0], deadline=far())
        counted = CountingStore(store)
        reader = EventLog(counted)
        await reader.poll_ends([5], deadline=far())  # a consumer that polls the index itself
        assert await reader.read(5, 8, 10, deadline=far()) == ((8, 9), (0, 0), 10)
        assert counted.requests == {"get": 2}  # the index, then the last segment only
        # A rewind (a restore from an older checkpoint) links further back.
        assert [key for key, _ in await read_all(reader, 5, offset=3)] == list(range(3, 10))
        assert counted.requests == {"get": 5}

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
        await writer.append(0, [4], [4], deadline=far())
        assert await reader.read(0, 0, 10, deadline=far()) == ((1, 2, 3, 4), (1, 2, 3, 4), 4)
        assert await reader.end_offset(0, deadline=far()) == 4

    asyncio.run(main())


@BACKENDS
def test_second_writer_is_contended(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        first, second = EventLog(store), EventLog(store)
        assert await first.append(7, [1], [1], deadline=far()) == 0
        assert await second.append(7, [2], [2], deadline=far()) == 1  # second learns the end
        # First still believes the end is 1 (its own last batch): it finds segment 1 taken
        # by a batch of its partition.
        with pytest.raises(Contended):
            await first.append(7, [3], [3], deadline=far())
        # Contended means start afresh: the next append finds the real end.
        assert await first.append(7, [3], [3], deadline=far()) == 2
        assert await read_all(EventLog(store), 7) == [(1, 1), (2, 2), (3, 3)]

    asyncio.run(main())


@BACKENDS
def test_producers_of_other_partitions_step_over_each_other(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        producers = [EventLog(store) for _ in range(4)]

        async def produce(partition: int, producer: EventLog) -> None:
            for round_ in range(5):
                await producer.append(partition, [round_], [partition], deadline=far())

        await asyncio.gather(*(produce(p, producer) for p, producer in enumerate(producers)))
        assert len(await store.list("events/segment=")) == 20  # numbered without a gap
        reader = EventLog(store)
        for partition in range(4):
            assert await read_all(reader, partition) == [(r, partition) for r in range(5)]

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
        store.fail_next(FaultKind.BEFORE, op="get")
        store.fail_next(FaultKind.BEFORE, op="get")
        assert await read_all(EventLog(store, clock=clock), 0) == [(1, 3), (2, 4), (5, 6)]
        assert len(await store.list("events/segment=")) == 2

    asyncio.run(main())


async def seed_log(
    store: ObjectStore, batches: list[tuple[int, int, int, int]], index: int
) -> None:
    """Write segments by hand, bypassing the writer: (seq, first offset, previous segment,
    event count) of partition 1, and the index saying partition 1's last batch is `index`."""
    ends = {}
    for seq, first, previous, count in batches:
        batch = SegmentBatch(
            partition=1,
            first_offset=first,
            previous=previous,
            keys=tuple(range(count)),
            values=tuple(range(count)),
        )
        await store.put(segment_path(seq), encode_segment(seq, (batch,)), CREATE)
        ends[seq] = first + count
    await publish_shard(store, 0, {1: (ends[index], index)}, max(ends) + 1)


@BACKENDS
@pytest.mark.parametrize(
    ("batches", "index", "offset"),
    [
        ([(0, 0, -1, 5), (1, 10, 0, 5)], 1, 0),  # a gap: 5..10 missing
        ([(0, 0, -1, 5), (1, 3, 0, 5)], 1, 0),  # an overlap
        ([(0, 0, -1, 5), (1, 5, 0, 5), (2, 10, 0, 5)], 2, 0),  # a previous that skips
        ([(0, 0, -1, 5), (2, 5, 1, 5)], 2, 0),  # a previous that is not there
        ([(0, 0, -1, 5)], 0, 6),  # an offset past the end
    ],
    ids=["gap", "overlap", "skip", "missing", "past-end"],
)
def test_broken_contiguity_is_corrupt(
    backend: str, tmp_path: Path, batches: list[tuple[int, int, int, int]], index: int, offset: int
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        await seed_log(store, batches, index)
        with pytest.raises(CorruptRecord):
            await read_all(EventLog(store), 1, max_events=3, offset=offset)

    asyncio.run(main())


@BACKENDS
def test_an_index_that_disagrees_with_the_segments_is_corrupt(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        await seed_log(store, [(0, 0, -1, 5)], 0)
        await publish_shard(store, 0, {1: (7, 0)}, 1)  # the index says 7, the batch ends at 5
        with pytest.raises(CorruptRecord, match="ends at offset 5, not 7"):
            await read_all(EventLog(store), 1)

    asyncio.run(main())


@BACKENDS
def test_malformed_segments_are_corrupt(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        log = EventLog(store)
        await log.append(2, [1, 2], [1, 2], deadline=far())
        good = (await store.get(segment_path(0))).body
        bad_bodies = [
            b"not json",
            encode_segment(1, tuple(EventLogSegmentOf(good).batches)),  # another seq
            good.replace(b'"previous":-1', b'"previous":0'),  # not before the segment
            good.replace(b'"first_offset":0', b'"first_offset":4'),  # first batch not at 0
        ]
        for body in bad_bodies:
            await store.put(segment_path(0), body, OVERWRITE)
            with pytest.raises(CorruptRecord):
                await read_all(EventLog(store), 2)
        await store.put(segment_path(0), good, OVERWRITE)
        assert await read_all(EventLog(store), 2) == [(1, 1), (2, 2)]
        with pytest.raises(CorruptRecord, match="not an event log segment path"):
            parse_segment_path("events/segment=1.json")

    asyncio.run(main())


def EventLogSegmentOf(body: bytes):  # type: ignore[no-untyped-def]
    from laminar_cluster.connectors.eventlog_segments import decode_segment

    return decode_segment(segment_path(0), body)


def test_a_segment_that_vanished_is_corrupt() -> None:
    async def main() -> None:
        store = open_store("memory://")
        log = EventLog(store)
        await log.append(0, [1], [1], deadline=far())
        await log.append(0, [2], [2], deadline=far())
        await store.delete(segment_path(0))
        with pytest.raises(CorruptRecord, match="gone"):
            await EventLog(store).read(0, 0, 1, deadline=far())

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
            await log.append_batches({}, deadline=far())
        third = SEGMENT_EVENTS_MAX // 3 + 1
        with pytest.raises(InvalidArgument, match="one segment holds at most"):
            await log.append_batches(
                {p: ([0] * third, [0] * third) for p in range(3)}, deadline=far()
            )
        with pytest.raises(InvalidArgument):
            await log.read(0, -1, 1, deadline=far())
        with pytest.raises(InvalidArgument):
            await log.read(0, 0, 0, deadline=far())
        assert await store.list("") == []

    asyncio.run(main())


def test_paths_and_vnodes() -> None:
    path = segment_path(345)
    assert path == "events/segment=00000000000000000345.json"
    assert parse_segment_path(path) == 345
    for bad in [
        "events/segment=345.json",
        "events/segment=00000000000000000345",
        "events/partition=00012/offset=00000000000000000345.json",
    ]:
        with pytest.raises(CorruptRecord):
            parse_segment_path(bad)
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


def test_a_log_of_layout_one_is_refused_with_what_to_do() -> None:
    async def main() -> None:
        store = open_store("memory://")
        await store.put(LAYOUT_PATH, b'{"version":1,"partitions":256}', CREATE)
        with pytest.raises(Refused, match=r"layout 1.*produce the events again"):
            await EventLog(store).partitions(deadline=far())
        await store.put(LAYOUT_PATH, b'{"version":7,"partitions":256}', OVERWRITE)
        with pytest.raises(CorruptRecord):
            await EventLog(store).partitions(deadline=far())

    asyncio.run(main())


def test_one_million_events_are_read_with_a_get_per_segment() -> None:
    """1,000,000 events of 64 partitions in 16 appends of all partitions: a reader of every
    partition reads each segment once (the cache holds them), plus the index."""
    partitions, rounds, per_batch = 64, 16, 977

    async def main() -> None:
        store = open_store("memory://")
        writer = EventLog(store)
        keys = list(range(per_batch))
        for _ in range(rounds):
            await writer.append_batches(
                {p: (keys, keys) for p in range(partitions)}, deadline=far()
            )
        counted = CountingStore(store)
        reader = EventLog(counted)
        await reader.poll_ends(range(partitions), deadline=far())
        total = 0
        for partition in range(partitions):
            offset = 0
            while True:
                got, _, offset = await reader.read(partition, offset, 10_000, deadline=far())
                if not got:
                    break
                total += len(got)
        assert total == partitions * rounds * per_batch == 1_000_448
        assert counted.requests == {"get": 1 + rounds}

    asyncio.run(main())
