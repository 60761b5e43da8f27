"""`ExchangeWriter` (connectors/exchange.py) on the real file:// store: routed events appended
to the record log wrapped with their (checkpoint, node, index) tags, `delivered_through`, and a
delivery appended twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.connectors.eventlog_segments import LogLayout
from laminar_cluster.connectors.exchange import (
    ROUTED_GROUP_BYTES_MAX,
    ExchangeWriter,
    decode_exchanged,
)
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore

P = 256
JOB = "words"


def far() -> float:
    return RealClock().monotonic() + 30.0


def file_store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/store?fsync=false")


def routed(key: str, i: int) -> dict[str, Any]:
    """A routed group of one event."""
    hashed = key_hash(key)
    return {"p": hashed % P, "h": hashed, "e": [msgspec.json.encode({"word": key, "i": i})]}


def delivery(checkpoint_id: int, node_id: int, keys: list[str]) -> Delivery:
    return Delivery(JOB, checkpoint_id, node_id, [routed(k, i) for i, k in enumerate(keys)])


async def partition_records(store: ObjectStore, partition: int) -> list[dict[str, Any]]:
    records, _ = await EventLog(store).read_records(partition, 0, 10_000, deadline=far())
    return [msgspec.json.decode(bytes(record)) for record in records]


def test_a_delivery_appends_each_event_wrapped_with_its_tag_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer = ExchangeWriter(store, RealClock(), P)
        keys = ["apple", "pear", "apple", "fig", "apple", "pear"]
        assert await writer.deliver(delivery(7, 3, keys), deadline=far()) is True
        assert await EventLog(store).layout(deadline=far()) == LogLayout(P, "records")
        for key in set(keys):
            partition = key_hash(key) % P
            got = await partition_records(store, partition)
            # i counts the delivery's groups of this partition, in the order delivered
            expected = [
                {"word": k, "i": i} for i, k in enumerate(keys) if key_hash(k) % P == partition
            ]
            assert [r["e"] for r in got] == [[event] for event in expected]
            assert [(r["c"], r["n"], r["i"]) for r in got] == [
                (7, 3, index) for index in range(len(expected))
            ]

    asyncio.run(main())


def test_fs3_tags_ascend_in_a_partition_across_deliveries(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer = ExchangeWriter(store, RealClock(), P)
        await writer.deliver(delivery(5, 2, ["a", "a"]), deadline=far())
        await writer.deliver(delivery(5, 9, ["a"]), deadline=far())
        await writer.deliver(delivery(6, 2, ["a"]), deadline=far())
        records, _ = await EventLog(store).read_records(key_hash("a") % P, 0, 100, deadline=far())
        tags = [found.tag for found in map(decode_exchanged, map(bytes, records)) if found]
        assert tags == [(5, 2, 0), (5, 2, 1), (5, 9, 0), (6, 2, 0)]

    asyncio.run(main())


def test_an_empty_delivery_writes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        writer = ExchangeWriter(store, RealClock(), P)
        assert await writer.deliver(Delivery(JOB, 4, 1, []), deadline=far()) is False
        assert store.total == 0

    asyncio.run(main())


def test_delivered_through_is_none_on_an_empty_store(tmp_path: Path) -> None:
    async def main() -> None:
        writer = ExchangeWriter(file_store(tmp_path), RealClock(), P)
        assert await writer.delivered_through(JOB, deadline=far()) is None

    asyncio.run(main())


def test_delivered_through_is_the_highest_checkpoint_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer = ExchangeWriter(store, RealClock(), P)
        await writer.deliver(delivery(3, 1, ["a", "b", "c"]), deadline=far())
        assert await writer.delivered_through(JOB, deadline=far()) == 3
        await writer.deliver(delivery(4, 2, ["d"]), deadline=far())  # other partitions end at 3
        await writer.deliver(delivery(9, 1, ["e"]), deadline=far())
        assert await writer.delivered_through(JOB, deadline=far()) == 9
        restarted = ExchangeWriter(file_store(tmp_path), RealClock(), P)
        assert await restarted.delivered_through(JOB, deadline=far()) == 9

    asyncio.run(main())


def test_fs3_a_delivery_delivered_twice_appends_its_tags_twice(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer = ExchangeWriter(store, RealClock(), P)
        again = delivery(8, 4, ["x", "x", "y"])
        assert await writer.deliver(again, deadline=far()) is True
        assert await writer.deliver(again, deadline=far()) is True  # at least once in the log
        got = await partition_records(store, key_hash("x") % P)
        tags = [(r["c"], r["n"], r["i"]) for r in got if r["e"][0]["word"] == "x"]
        assert tags == [(8, 4, 0), (8, 4, 1), (8, 4, 0), (8, 4, 1)]  # the reader deduplicates
        assert await writer.delivered_through(JOB, deadline=far()) == 8

    asyncio.run(main())


@pytest.mark.parametrize(
    "record",
    [
        {"p": 1, "h": 1},
        {"p": 1, "h": "1", "e": [b"{}"]},
        {"p": "x", "h": 1, "e": [b"{}"]},
        {"p": 1, "h": 1, "e": 5},
        {"p": 1, "h": 1, "e": b"{}"},
        {"p": 1, "h": 1, "e": []},
        {"p": 2, "h": 1, "e": [b"{}"]},
        {"p": 255, "h": -1, "e": [b"{}"]},
        {"p": 1, "h": 1, "e": [b"{}", b"[1]"]},
        {"p": 1, "h": 1, "e": [b'{"a":']},
        {"p": 1, "h": 1, "e": [b'{"a":"' + b"x" * ROUTED_GROUP_BYTES_MAX + b'"}']},
        {"p": 1, "h": 1, "e": [b'{"a":"' + b"x" * 40_000 + b'"}'] * 2},
    ],
    ids=[
        "missing-event",
        "hash-not-int",
        "partition-not-int",
        "events-not-a-list",
        "events-not-a-list-of-bytes",
        "no-event",
        "partition-not-the-hashes",
        "hash-not-u64",
        "event-not-an-object",
        "event-not-json",
        "event-too-large",
        "group-too-large",
    ],
)
def test_a_malformed_routed_record_is_corrupt(tmp_path: Path, record: dict[str, Any]) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        writer = ExchangeWriter(store, RealClock(), P)
        bad = Delivery(JOB, 2, 1, [routed("a", 0), record])
        with pytest.raises(CorruptRecord):
            await writer.deliver(bad, deadline=far())
        assert store.requests["put"] == 0

    asyncio.run(main())


def test_a_delivery_costs_a_segment_and_an_index_write_and_a_leader_change_a_few_reads(
    tmp_path: Path,
) -> None:
    """The repartition's request budget (docs/jobs.md, "Cost and latency"): a steady delivery
    of groups that fit one segment is 2 PUTs (the segment, the index) and 1 GET; a new
    leader's `delivered_through` reads the layout, one poll of the index and each segment
    holding a partition's last group once (here one), not a read per partition."""

    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        writer = ExchangeWriter(store, RealClock(), P)
        keys = [f"k{n}" for n in range(50)]  # 50 groups over most of 50 partitions
        for checkpoint_id in range(1, 4):
            store.reset()
            await writer.deliver(delivery(checkpoint_id, 1, keys), deadline=far())
        assert dict(store.requests) == {"put": 2, "get": 1}
        store.reset()
        leader = ExchangeWriter(store, RealClock(), P)
        assert await leader.delivered_through(JOB, deadline=far()) == 3
        assert dict(store.requests) == {"get": 3}

    asyncio.run(main())
