"""The event log's published ends (runtime/eventlog_ends.py, DC §3.7 "Log ends"): appends
publish them (concurrent appends sharing writes), a reader that polled them lists only a
partition that moved, racing producers merge, a log without them (or with bad ones) is listed
as before, and a restarted producer repairs them. Requests are counted with `CountingStore`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.runtime.eventlog import EventLog
from laminar_cluster.runtime.eventlog_batches import encode_batch, event_batch_path
from laminar_cluster.runtime.eventlog_ends import (
    ENDS_SHARD_PARTITIONS,
    ends_path,
    parse_ends_path,
    shard_of,
)
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
def test_appends_publish_ends_and_concurrent_appends_share_writes(
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
        # 32 partitions appended at once: far fewer ends writes than appends.
        await asyncio.gather(*(log.append(p, [p], [p], deadline=far()) for p in range(32)))
        writes = store.by_key[("put", ends_path(0))] - 1
        assert 1 <= writes < 32
        assert await reader.poll_ends(range(32), deadline=far()) is True
        assert [reader.ends.published_end(p) for p in range(32)] == [
            3 if p == 3 else 1 for p in range(32)
        ]

    asyncio.run(main())


@BACKENDS
def test_a_reader_that_polled_the_ends_lists_only_what_moved(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = KeyCounting(open_backend(backend, tmp_path))
        writer, reader = EventLog(store), EventLog(store)
        for partition in (0, 1):
            await writer.append(partition, [partition], [partition], deadline=far())
        await reader.poll_ends([0, 1], deadline=far())
        for partition in (0, 1):  # caught up with what it listed: empty reads
            assert (await reader.read(partition, 0, 10, deadline=far()))[0] == (partition,)
            assert (await reader.read(partition, 1, 10, deadline=far()))[0] == ()
        store.reset()
        store.by_key.clear()
        for _ in range(20):  # idle: no listing at all
            for partition in (0, 1):
                assert (await reader.read(partition, 1, 10, deadline=far()))[0] == ()
        assert store.requests.get("list", 0) == 0
        assert await reader.poll_ends([0, 1], deadline=far()) is False  # one conditional GET
        assert store.requests == {"get": 1}
        await writer.append(1, [7], [7], deadline=far())
        assert await reader.poll_ends([0, 1], deadline=far()) is True
        store.by_key.clear()
        assert (await reader.read(0, 1, 10, deadline=far()))[0] == ()
        assert (await reader.read(1, 1, 10, deadline=far()))[0] == (7,)
        # The partition that moved: its next batch got by its key (it starts where the last
        # ended), no listing at all.
        assert {key for (op, key) in store.by_key if op == "list"} == set()
        gets = {key for (op, key) in store.by_key if op == "get"}
        assert gets == {event_batch_path(1, 1)}

    asyncio.run(main())


@BACKENDS
def test_a_declared_empty_log_is_read_without_listing(backend: str, tmp_path: Path) -> None:
    """declare_partitions publishes every end (0): a reader of an empty log polls one shard."""

    async def main() -> None:
        store = KeyCounting(open_backend(backend, tmp_path))
        writer, reader = EventLog(store), EventLog(store)
        await writer.declare_partitions(64, deadline=far())
        await writer.declare_partitions(64, deadline=far())  # again: no second write
        assert sum(1 for (op, key) in store.by_key if op == "put" and "ends" in key) == 1
        await reader.poll_ends(range(64), deadline=far())
        store.by_key.clear()
        for partition in range(64):
            assert (await reader.read(partition, 0, 10, deadline=far()))[0] == ()
        assert not store.by_key  # no request at all
        await writer.append(5, [1, 2], [3, 4], deadline=far())
        await writer.append(5, [5], [6], deadline=far())
        assert await reader.poll_ends(range(64), deadline=far()) is True
        store.by_key.clear()
        assert (await reader.read(5, 0, 10, deadline=far()))[:2] == ((1, 2, 5), (3, 4, 6))
        assert {op for (op, _key) in store.by_key} == {"get"}  # two batches by key

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
def test_without_or_with_bad_ends_a_reader_lists_as_before(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        # A log written before ends were published: batches only.
        await store.put(event_batch_path(2, 0), encode_batch(2, 0, (5,), (6,)), CREATE)
        reader = EventLog(store)
        assert await reader.poll_ends([2], deadline=far()) is True  # absent, now known
        assert reader.ends.published_end(2) is None
        assert await reader.read(2, 0, 10, deadline=far()) == ((5,), (6,), 1)
        await store.put(event_batch_path(2, 1), encode_batch(2, 1, (7,), (8,)), CREATE)
        assert await reader.read(2, 1, 10, deadline=far()) == ((7,), (8,), 2)
        # Bad bytes where the ends belong: reported, never trusted, listed instead.
        await store.put(ends_path(0), b"{not ends}", OVERWRITE)
        other = EventLog(store)
        await other.poll_ends([2], deadline=far())
        assert other.ends.published_end(2) is None
        assert await other.read(2, 0, 10, deadline=far()) == ((5, 7), (6, 8), 2)

    asyncio.run(main())


@BACKENDS
def test_a_restarted_producer_repairs_ends_its_predecessor_left_behind(
    backend: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        log = EventLog(store)
        await log.append(4, [1], [1], deadline=far())
        # A producer died after its batch and before its end: the ends say 1, the log has 2.
        await store.put(event_batch_path(4, 1), encode_batch(4, 1, (2,), (2,)), CREATE)
        reader = EventLog(store)
        await reader.poll_ends([4], deadline=far())
        assert reader.ends.published_end(4) == 1
        restarted = EventLog(store)
        ends = {4: await restarted.end_offset(4, deadline=far())}
        await restarted.publish_ends(ends, deadline=far())
        assert await reader.poll_ends([4], deadline=far()) is True
        assert reader.ends.published_end(4) == 2
        await restarted.publish_ends({4: 1}, deadline=far())  # an end never goes back
        await reader.poll_ends([4], deadline=far())
        assert reader.ends.published_end(4) == 2

    asyncio.run(main())


def test_shards_and_paths() -> None:
    assert shard_of(0) == shard_of(ENDS_SHARD_PARTITIONS - 1) == 0
    assert shard_of(ENDS_SHARD_PARTITIONS) == 1
    assert parse_ends_path(ends_path(7)) == 7
    assert ends_path(1) == "event-log-ends/shard=00001.json"
