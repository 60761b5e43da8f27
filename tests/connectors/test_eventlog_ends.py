"""The event log's index (connectors/eventlog_ends.py, DC §3.7 "Log ends"): an append is one
segment and one index write whatever the partitions it holds, a reader that polled the index
reads only the segments of a partition that moved, racing producers merge, a bad index is
reported and read as absent, and a restarted producer publishes what its predecessor left
unpublished. Requests are counted with `CountingStore`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_ends import ENDS_SHARD_PARTITIONS, ends_path, shard_of
from laminar_cluster.connectors.eventlog_segments import SegmentBatch, encode_segment, segment_path
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore

BACKENDS = pytest.mark.parametrize("backend", ["memory", "file"])


def open_backend(backend: str, tmp_path: Path) -> ObjectStore:
    return open_store("memory://" if backend == "memory" else f"file://{tmp_path}/s?fsync=false")


def far() -> float:
    return RealClock().monotonic() + 60.0


class KeyCounting(CountingStore):
    """`CountingStore` that also counts requests per (operation, key or prefix)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.by_key: dict[tuple[str, str], int] = {}

    def note(self, op: str, key: str) -> None:
        self.by_key[(op, key)] = self.by_key.get((op, key), 0) + 1

    async def put(self, key, body, mode):  # type: ignore[no-untyped-def]
        self.note("put", key)
        return await super().put(key, body, mode)

    async def list(self, prefix, *, offset=None, limit=None):  # type: ignore[no-untyped-def]
        self.note("list", prefix)
        return await super().list(prefix, offset=offset, limit=limit)

    async def get(self, key, *, end=None):  # type: ignore[no-untyped-def]
        self.note("get", key)
        return await super().get(key, end=end)


@BACKENDS
def test_an_append_of_many_partitions_is_one_segment_and_one_index_write(
    backend: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = KeyCounting(open_backend(backend, tmp_path))
        log = EventLog(store)
        await log.append(3, [1, 2], [1, 2], deadline=far())
        assert store.by_key[("put", ends_path(0))] == 1
        reader = EventLog(store)
        assert await reader.poll_ends([3], deadline=far()) is True
        assert reader.ends.published_end(3) == 2
        store.reset()
        store.by_key.clear()
        firsts = await log.append_batches({p: ([p], [p]) for p in range(256)}, deadline=far())
        assert firsts == {p: 2 if p == 3 else 0 for p in range(256)}
        puts = sorted(key for (op, key) in store.by_key if op == "put")
        assert puts == [ends_path(0), segment_path(1)]
        assert store.requests["put"] == 2
        assert await reader.poll_ends(range(256), deadline=far()) is True
        assert [reader.ends.published_end(p) for p in range(256)] == [
            3 if p == 3 else 1 for p in range(256)
        ]

    asyncio.run(main())


@BACKENDS
def test_a_reader_that_polled_the_index_reads_only_what_moved(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = KeyCounting(open_backend(backend, tmp_path))
        writer, reader = EventLog(store), EventLog(store)
        await writer.append_batches({0: ([0], [0]), 1: ([1], [1])}, deadline=far())
        await reader.poll_ends([0, 1], deadline=far())
        for partition in (0, 1):
            assert (await reader.read(partition, 0, 10, deadline=far()))[0] == (partition,)
            assert (await reader.read(partition, 1, 10, deadline=far()))[0] == ()
        store.reset()
        store.by_key.clear()
        for _ in range(20):  # idle: no request at all
            for partition in (0, 1):
                assert (await reader.read(partition, 1, 10, deadline=far()))[0] == ()
        assert store.requests == {}
        assert await reader.poll_ends([0, 1], deadline=far()) is False  # one conditional GET
        assert store.requests == {"get": 1}
        await writer.append(2, [9], [9], deadline=far())  # another partition's segment
        await writer.append(1, [7], [7], deadline=far())
        assert await reader.poll_ends([0, 1], deadline=far()) is True
        store.by_key.clear()
        assert (await reader.read(0, 1, 10, deadline=far()))[0] == ()
        assert (await reader.read(1, 1, 10, deadline=far()))[0] == (7,)
        # The partition that moved: its last segment, got by the index; nothing else.
        assert set(store.by_key) == {("get", segment_path(2))}

    asyncio.run(main())


@BACKENDS
def test_a_declared_empty_log_is_read_without_a_request(backend: str, tmp_path: Path) -> None:
    """declare_partitions publishes every end (0): a reader of an empty log polls one shard."""

    async def main() -> None:
        store = KeyCounting(open_backend(backend, tmp_path))
        writer, reader = EventLog(store), EventLog(store)
        await writer.declare_partitions(64, deadline=far())
        await writer.declare_partitions(64, deadline=far())  # again: no second write
        assert sum(1 for (op, key) in store.by_key if op == "put" and "ends" in key) == 1
        await reader.poll_ends(range(64), deadline=far())
        assert reader.caught_up(dict.fromkeys(range(64), 0))
        store.by_key.clear()
        for partition in range(64):
            assert (await reader.read(partition, 0, 10, deadline=far()))[0] == ()
        assert not store.by_key  # no request at all
        await writer.append(5, [1, 2], [3, 4], deadline=far())
        await writer.append(5, [5], [6], deadline=far())
        assert await reader.poll_ends(range(64), deadline=far()) is True
        assert not reader.caught_up(dict.fromkeys(range(64), 0))
        store.by_key.clear()
        assert (await reader.read(5, 0, 10, deadline=far()))[:2] == ((1, 2, 5), (3, 4, 6))
        assert set(store.by_key) == {("get", segment_path(0)), ("get", segment_path(1))}

    asyncio.run(main())


@BACKENDS
def test_racing_producers_merge_their_ends(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        producers = [EventLog(store) for _ in range(4)]
        await asyncio.gather(
            *(
                producer.append(
                    partition, [1] * (partition + 1), [1] * (partition + 1), deadline=far()
                )
                for partition, producer in enumerate(producers)
            )
        )
        reader = EventLog(store)
        await reader.poll_ends(range(4), deadline=far())
        assert [reader.ends.published_end(p) for p in range(4)] == [1, 2, 3, 4]

    asyncio.run(main())


@BACKENDS
def test_a_bad_index_is_reported_and_read_as_absent(
    backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        await EventLog(store).append(2, [5], [6], deadline=far())
        await store.put(ends_path(0), b"{not ends}", OVERWRITE)
        reader = EventLog(store)
        await reader.poll_ends([2], deadline=far())
        assert reader.ends.published_end(2) is None
        assert await reader.read(2, 0, 10, deadline=far()) == ((), (), 0)
        assert "event log index unreadable" in caplog.text

    asyncio.run(main())


@BACKENDS
def test_a_restarted_producer_publishes_what_its_predecessor_left_unpublished(
    backend: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        log = EventLog(store)
        await log.append(4, [1], [1], deadline=far())
        # A producer died after its segment and before its index write: the index says 1.
        batch = SegmentBatch(partition=4, first_offset=1, previous=0, keys=(2,), values=(2,))
        await store.put(segment_path(1), encode_segment(1, (batch,)), CREATE)
        reader = EventLog(store)
        await reader.poll_ends([4], deadline=far())
        assert reader.ends.published_end(4) == 1
        restarted = EventLog(store)
        assert await restarted.recover([4], deadline=far()) == {4: 2}
        assert await reader.poll_ends([4], deadline=far()) is True
        assert reader.ends.published_end(4) == 2
        assert await restarted.append(4, [3], [3], deadline=far()) == 2
        await reader.poll_ends([4], deadline=far())
        assert await reader.read(4, 0, 10, deadline=far()) == ((1, 2, 3), (1, 2, 3), 3)

    asyncio.run(main())


def test_shards_and_paths() -> None:
    assert shard_of(0) == shard_of(ENDS_SHARD_PARTITIONS - 1) == 0
    assert shard_of(ENDS_SHARD_PARTITIONS) == 1
    assert ends_path(1) == "event-log-ends/shard=00001.json"
