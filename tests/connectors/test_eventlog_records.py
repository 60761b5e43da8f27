"""Record logs (connectors/eventlog_records.py, DC §3.7 "Record logs"): round trip, canonical
bytes, one kind per log, limits, corrupt and foreign segments, and the key -> partition ->
vnode identity; on memory:// and file://."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.assignment.vnode import VNODE_COUNT, Key, encode_key, vnode_for_key
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import (
    EVENT_RECORD_BYTES_MAX,
    RecordBatch,
    canonical_event,
    decode_record_segment,
    encode_record_segment,
    key_hash,
    partition_of_key,
)
from laminar_cluster.connectors.eventlog_segments import (
    LogLayout,
    decode_layout,
    encode_layout,
    segment_path,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.store import OVERWRITE, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore

BACKENDS = pytest.mark.parametrize("backend", ["memory", "file"])
P = 256


def open_backend(backend: str, tmp_path: Path) -> ObjectStore:
    return open_store("memory://" if backend == "memory" else f"file://{tmp_path}/s?fsync=false")


def far() -> float:
    return RealClock().monotonic() + 60.0


def keyed(key: Key, event: dict[str, object]) -> tuple[Key, bytes]:
    return key, msgspec.json.encode(event)


def grouped(
    pairs: list[tuple[Key, bytes]], partitions: int = P
) -> dict[int, list[tuple[Key, bytes]]]:
    batches: dict[int, list[tuple[Key, bytes]]] = {}
    for key, event in pairs:
        batches.setdefault(partition_of_key(key, partitions), []).append((key, event))
    return batches


@BACKENDS
def test_records_round_trip_by_key_partition(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        writer = EventLog(store)
        await writer.declare_records(deadline=far())
        pairs = [keyed(f"user-{i % 7}", {"i": i, "name": "é", "x": 0.5}) for i in range(50)]
        await writer.append_records(grouped(pairs), deadline=far())
        await writer.append_records(grouped(pairs[:10]), deadline=far())
        reader = EventLog(store)
        seen: list[bytes] = []
        for partition in sorted(grouped(pairs)):
            events, end = await reader.read_records(partition, 0, 1_000, deadline=far())
            assert end == len(events)
            seen.extend(events)
        assert sorted(seen) == sorted([event for _, event in pairs + pairs[:10]])
        # Each key's events in one partition, in the order sent.
        part = partition_of_key("user-3", P)
        events, _ = await reader.read_records(part, 0, 1_000, deadline=far())
        mine = [msgspec.json.decode(e)["i"] for e in events if msgspec.json.decode(e)["i"] % 7 == 3]
        assert mine == [i for i in range(50) if i % 7 == 3] + [3]

    asyncio.run(main())


def test_a_record_segment_is_canonical_and_holds_events_as_raw_json() -> None:
    batch = RecordBatch(
        partition=5,
        first_offset=0,
        previous=-1,
        key_hashes=(5, 261),
        records=(msgspec.Raw(b'{"a":1}'), msgspec.Raw(b'{"b":[true,null,"\xc3\xa9"]}')),
    )
    body = encode_record_segment(0, (batch,))
    assert body == (
        b'{"version":2,"seq":0,"batches":[{"partition":5,"first_offset":0,"previous":-1,'
        b'"key_hashes":[5,261],"records":[{"a":1},{"b":[true,null,"\xc3\xa9"]}]}]}'
    )
    assert decode_record_segment(segment_path(0), body).batches == (batch,)
    for bad, fact in [
        (body.replace(b'"records":[{', b'"records":[ {'), "canonical"),
        (body.replace(b'{"a":1}', b"[1]"), "not a JSON object"),
        (body.replace(b"[5,261]", b"[5,262]"), "vnode"),
        (body.replace(b'"seq":0', b'"seq":1'), "holds segment 1"),
        (body.replace(b'{"a":1}', b'{"a":1'), "not valid JSON"),
    ]:
        with pytest.raises(CorruptRecord, match=fact):
            decode_record_segment(segment_path(0), bad)


def test_events_are_stored_in_one_form_and_checked_before_writing() -> None:
    assert canonical_event(b'{ "b" : 1.50, "a": "\\u00e9" }') == '{"b":1.5,"a":"é"}'.encode()
    for bad in (b"[1]", b'"x"', b"{", b"", b"not json"):
        with pytest.raises(InvalidArgument):
            canonical_event(bad)
    big = msgspec.json.encode({"x": "y" * EVENT_RECORD_BYTES_MAX})
    with pytest.raises(InvalidArgument, match=f"maximum is {EVENT_RECORD_BYTES_MAX}"):
        canonical_event(big)
    assert canonical_event(msgspec.json.encode({"x": "y" * (EVENT_RECORD_BYTES_MAX - 8)}))


def test_an_oversized_or_misplaced_record_is_refused_before_writing() -> None:
    async def main() -> None:
        store = CountingStore(open_store("memory://"))
        log = EventLog(store)
        await log.declare_records(deadline=far())
        store.reset()
        big = msgspec.json.encode({"x": "y" * EVENT_RECORD_BYTES_MAX})
        with pytest.raises(InvalidArgument, match="maximum"):
            await log.append_records({partition_of_key(1, P): [(1, big)]}, deadline=far())
        wrong = (partition_of_key(1, P) + 1) % P
        with pytest.raises(InvalidArgument, match="partition_of_key"):
            await log.append_records({wrong: [keyed(1, {"a": 1})]}, deadline=far())
        assert "put" not in store.requests

    asyncio.run(main())


@BACKENDS
def test_a_log_is_of_one_kind(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = open_backend(backend, tmp_path)
        records = EventLog(store)
        with pytest.raises(InvalidArgument, match="declare_records"):
            await records.append_records(grouped([keyed("k", {"a": 1})]), deadline=far())
        await records.declare_records(512, deadline=far())
        await records.declare_records(512, deadline=far())  # the same again: a no-op
        pairs = [keyed("k", {"a": 1})]
        await records.append_records(grouped(pairs, 512), deadline=far())
        part = partition_of_key("k", 512)
        other = EventLog(store)
        with pytest.raises(InvalidArgument, match="not 256 of records"):
            await other.declare_records(256, deadline=far())
        with pytest.raises(InvalidArgument, match="declared with 512 partitions of records"):
            await other.declare_partitions(512, deadline=far())
        with pytest.raises(InvalidArgument, match="read_records"):
            await EventLog(store).read(part, 0, 10, deadline=far())  # the batch says so
        assert await other.layout(deadline=far()) == LogLayout(512, "records")
        with pytest.raises(InvalidArgument, match="read_records"):
            await other.read(part, 0, 10, deadline=far())
        with pytest.raises(InvalidArgument, match="holds records"):
            await other.append(part, [1], [1], deadline=far())
        ints = EventLog(open_backend(backend, tmp_path / "ints"))
        await ints.declare_partitions(8, deadline=far())
        await ints.append(3, [1], [2], deadline=far())
        with pytest.raises(InvalidArgument, match=r"read it with EventLog\.read$"):
            await EventLog(ints.store).read_records(3, 0, 10, deadline=far())
        with pytest.raises(InvalidArgument, match="holds ints"):
            await ints.append_records({3: [(1, b"{}")]}, deadline=far())
        with pytest.raises(InvalidArgument, match="declared with 8 partitions of ints"):
            await EventLog(ints.store).declare_records(deadline=far())

    asyncio.run(main())


def test_layout_records_version_2_reads_as_ints_and_3_as_records() -> None:
    assert encode_layout(8) == b'{"version":2,"partitions":8}'
    assert decode_layout(b'{"version":2,"partitions":8}') == LogLayout(8, "ints")
    three = encode_layout(256, "records")
    assert three == b'{"version":3,"partitions":256,"kind":"records"}'
    assert decode_layout(three) == LogLayout(256, "records")
    with pytest.raises(InvalidArgument, match="multiple of 256"):
        encode_layout(100, "records")
    with pytest.raises(CorruptRecord, match="multiple of 256"):
        decode_layout(b'{"version":3,"partitions":100,"kind":"records"}')


def test_a_foreign_segment_in_a_record_log_is_corrupt() -> None:
    async def main() -> None:
        store = open_store("memory://")
        log = EventLog(store)
        await log.declare_records(deadline=far())
        part = partition_of_key("k", P)
        await log.append_records({part: [keyed("k", {"a": 1})]}, deadline=far())
        await store.put(segment_path(0), b'{"version":2,"seq":0,"batches":[]} ', OVERWRITE)
        with pytest.raises(CorruptRecord, match=segment_path(0)):
            await EventLog(store).read_records(part, 0, 10, deadline=far())
        await store.put(segment_path(0), b"\x00garbage", OVERWRITE)
        with pytest.raises(CorruptRecord, match=segment_path(0)):
            await EventLog(store).read_records(part, 0, 10, deadline=far())

    asyncio.run(main())


def test_record_reads_use_the_index_and_read_a_segment_once() -> None:
    async def main() -> None:
        store = open_store("memory://")
        writer = EventLog(store)
        await writer.declare_records(deadline=far())
        pairs = [keyed(i, {"i": i}) for i in range(2_000)]
        for _ in range(3):
            await writer.append_records(grouped(pairs), deadline=far())
        counted = CountingStore(store)
        reader = EventLog(counted)
        await reader.poll_ends(range(P), deadline=far())
        ends = {}
        for partition in range(P):
            events, ends[partition] = await reader.read_records(
                partition, 0, 10_000, deadline=far()
            )
            assert ends[partition] == len(events)
            assert await reader.known_end(partition, deadline=far()) == len(events)
        assert sum(ends.values()) == 6_000
        assert reader.caught_up(ends)
        assert counted.requests == {"get": 1 + 3}  # the index, then each segment once

    asyncio.run(main())


keys = st.one_of(
    st.text(max_size=20),
    st.binary(max_size=20),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


@settings(max_examples=300, deadline=None)
@given(key=keys, multiple=st.integers(min_value=1, max_value=256))
def test_partition_of_key_mod_256_is_the_keys_vnode(key: Key, multiple: int) -> None:
    partitions = VNODE_COUNT * multiple
    partition = partition_of_key(key, partitions)
    assert 0 <= partition < partitions
    assert partition % VNODE_COUNT == vnode_for_key(key)
    assert partition == key_hash(key) % partitions


def test_partition_counts_must_be_multiples_of_256() -> None:
    for bad in (0, 100, 257, 65_536 + 256):
        with pytest.raises(InvalidArgument, match="multiple of 256"):
            partition_of_key("k", bad)


@pytest.mark.parametrize("key", ["", "user-7", "é€😀", "x" * 300, b"user-7", 7, -1, ("a", 1)])
def test_key_hash_is_xxh3_of_the_canonical_key_encoding(key: Key) -> None:
    assert key_hash(key) == xxhash.xxh3_64_intdigest(encode_key(key))


@pytest.mark.parametrize("key", [True, 1.5, None, ["a"]])
def test_key_hash_refuses_what_is_no_key(key: object) -> None:
    with pytest.raises(InvalidArgument):
        key_hash(key)  # type: ignore[arg-type]
