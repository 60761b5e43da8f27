"""The public `Producer` (connectors/producer.py) on the real file:// store: events by key
into a record log, flushes, the layout it declares, two producers on disjoint partitions, and
`EventLogSource`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from laminar_cluster.assignment.vnode import VNODE_COUNT, vnode_for_key
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import partition_of_key
from laminar_cluster.connectors.eventlog_segments import LogLayout
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.connectors.sources import EventLogSource
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore


class Click(msgspec.Struct):
    user: str
    page: int


def far() -> float:
    return RealClock().monotonic() + 60.0


def file_store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/store?fsync=false")


async def read_partition(log: EventLog, partition: int) -> list[dict[str, object]]:
    events, _ = await log.read_records(partition, 0, 100_000, deadline=far())
    return [msgspec.json.decode(event) for event in events]


def test_a_producer_partitions_by_key_and_keeps_each_keys_order(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        async with Producer(store, flush_events=100) as producer:
            for i in range(250):
                await producer.send(f"user-{i % 9}", {"user": f"user-{i % 9}", "i": i})
            await producer.send("user-1", Click(user="user-1", page=7))
            assert producer.events_sent == 200  # two automatic flushes
        assert producer.events_sent == 251  # and the last on exit
        log = EventLog(file_store(tmp_path))
        assert await log.layout(deadline=far()) == LogLayout(256, "records")
        for user in range(9):
            key = f"user-{user}"
            partition = partition_of_key(key, 256)
            assert partition % VNODE_COUNT == vnode_for_key(key)
            events = [e for e in await read_partition(log, partition) if e["user"] == key]
            expected = [{"user": key, "i": i} for i in range(250) if i % 9 == user]
            if user == 1:
                expected.append({"user": "user-1", "page": 7})
            assert events == expected

    asyncio.run(main())


def test_a_flush_is_one_segment_and_nothing_buffered_is_no_request(tmp_path: Path) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        producer = Producer(store, partitions=512)
        await producer.flush()
        assert store.requests == {}
        for i in range(1_000):
            await producer.send(i, {"i": i})
        await producer.flush()
        segments = [key async for key in _keys(store, "events/segment=")]
        assert len(segments) == 1
        assert producer.events_sent == 1_000

    asyncio.run(main())


async def _keys(store: ObjectStore, prefix: str):  # type: ignore[no-untyped-def]
    for meta in await store.list(prefix):
        yield meta.key


def test_a_log_declared_otherwise_is_refused_with_what_to_do(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        async with Producer(store) as producer:
            await producer.send("k", {"a": 1})
        other = Producer(store, partitions=512)
        await other.send("k", {"a": 2})
        with pytest.raises(InvalidArgument, match="give 256 partitions of records"):
            await other.flush()
        with pytest.raises(InvalidArgument, match="multiple of 256"):
            Producer(store, partitions=100)

    asyncio.run(main())


def test_bad_events_are_refused_at_send(tmp_path: Path) -> None:
    async def main() -> None:
        producer = Producer(file_store(tmp_path))
        with pytest.raises(InvalidArgument, match="maximum is 65536"):
            await producer.send("k", {"x": "y" * 70_000})
        with pytest.raises(InvalidArgument, match="cannot be encoded"):
            await producer.send("k", {"x": object()})
        with pytest.raises(InvalidArgument, match="bool is not a key type"):
            await producer.send(True, {"x": 1})
        assert producer.buffered_events == 0

    asyncio.run(main())


def test_two_producers_on_disjoint_partitions_share_one_log(tmp_path: Path) -> None:
    async def main() -> None:
        low = [k for k in range(400) if partition_of_key(k, 256) < 128]
        high = [k for k in range(400) if partition_of_key(k, 256) >= 128]

        async def produce(keys: list[int]) -> None:
            async with Producer(file_store(tmp_path), flush_events=16) as producer:
                for key in keys:
                    await producer.send(key, {"k": key})

        async with asyncio.TaskGroup() as group:
            group.create_task(produce(low))
            group.create_task(produce(high))
        log = EventLog(file_store(tmp_path))
        seen = []
        for partition in range(256):
            seen += [e["k"] for e in await read_partition(log, partition)]
        assert sorted(seen) == list(range(400))

    asyncio.run(main())


def test_event_log_source_declares_a_multiple_of_256_partitions() -> None:
    assert EventLogSource().describe() == "event log of records, 256 partitions"
    assert EventLogSource(512).partitions == 512
    with pytest.raises(InvalidArgument, match="multiple of 256"):
        EventLogSource(300)
