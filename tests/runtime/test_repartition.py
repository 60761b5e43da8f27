"""A repartitioned job (a `FileSource`) in `JobProcessor`: the first stage routes each file
record's events to their keys' record log partitions (dead letters name the file and record);
the second stage applies each routed event once, however often its delivery was appended to
the log (a crashed or deposed leader's deliverer repeats deliveries), and its last tags are cut
and restored with the vnode's state."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster import Count, FileSource, Job, ParquetSink
from laminar_cluster.clock import RealClock
from laminar_cluster.clock.simulated import SimulatedClock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.connectors.exchange import (
    EXCHANGE,
    ROUTED_GROUP_BYTES_MAX,
    ExchangeWriter,
    group_bytes,
)
from laminar_cluster.errors import CorruptRecord, LaminarError, Refused
from laminar_cluster.jobs import StepFailed, compile_job
from laminar_cluster.runtime.engine_types import SourceBatch
from laminar_cluster.runtime.file_splits import FileRecords, split_offset
from laminar_cluster.runtime.job_processor import JobProcessor, decode_output
from laminar_cluster.runtime.repartition import (
    ROUTED_PENDING_BYTES_MAX,
    unwrap_state,
    wrap_state,
)
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.faulty import FaultConfig, FaultyStore

P = 256
SPLIT_VNODE = 7


def _job(policy: str = "dead_letter") -> Job:
    return (
        Job("words")
        .source(FileSource("books/", format="text"))
        .flat_map(lambda line: ({"word": w} for w in line["text"].split()))
        .key_by(lambda e: e["word"], name="word")
        .aggregate(Count(name="count"))
        .sink(ParquetSink("out/"))
        .on_error(policy)
    )


def _processor(policy: str = "dead_letter") -> JobProcessor:
    clock = SimulatedClock()
    return JobProcessor(compile_job(_job(policy)), clock, idle_close_s=None, repartition=P)


def _split_batch(lines: list[bytes], file: str = "books/a.txt", seq: int = 0) -> SourceBatch:
    records = FileRecords(file, seq, 0, lines)
    return SourceBatch(split_offset(seq, 0), split_offset(seq + 1, 0), records, len(lines))


def _lines(*texts: str) -> list[bytes]:
    return [json.dumps({"text": text}).encode() for text in texts]


def _emits(processor: JobProcessor, *vnodes: int) -> list[tuple[str, dict[str, Any]]]:
    cut = processor.capture(vnodes)()
    for vnode in vnodes:
        processor.commit_output(vnode)
    return [(e.stream, e.record) for e in decode_output(cut.output, what="test")]


def test_route_sends_each_event_to_its_keys_partition_of_the_record_log_in_groups() -> None:
    processor = _processor()
    processor.restore(SPLIT_VNODE, None)
    processor.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines("a b c", "b a")))
    routed = _emits(processor, SPLIT_VNODE)
    assert {stream for stream, _ in routed} == {EXCHANGE}
    by_partition: dict[int, list[str]] = {}
    for _, group in routed:
        words = [json.loads(event)["word"] for event in group["e"]]
        assert group["h"] == key_hash(words[0])  # the first event's key hash
        assert all(key_hash(word) % P == group["p"] for word in words)
        by_partition.setdefault(group["p"], []).extend(words)
    expected: dict[int, list[str]] = {}
    for word in ["a", "b", "c", "b", "a"]:
        expected.setdefault(key_hash(word) % P, []).append(word)
    assert by_partition == expected  # every event once, in order within its partition
    assert len(routed) == len(expected)  # one group per partition for a small batch


def test_a_group_ends_before_it_would_outgrow_one_record_of_the_log() -> None:
    processor = _processor()
    processor.restore(SPLIT_VNODE, None)
    word = "w" * 20_000  # three fit in a group of at most ROUTED_GROUP_BYTES_MAX
    processor.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines(*[word] * 7)))
    groups = [group for _, group in _emits(processor, SPLIT_VNODE)]
    assert [len(group["e"]) for group in groups] == [3, 3, 1]
    assert all(group_bytes(group["e"]) <= ROUTED_GROUP_BYTES_MAX for group in groups)


def test_fs4_a_record_not_decodable_or_whose_flat_map_raises_is_a_dead_letter_naming_the_file() -> (
    None
):
    processor = _processor()
    processor.restore(SPLIT_VNODE, None)
    lines = [b"not json", json.dumps({"no_text": 1}).encode(), *_lines("ok")]
    processor.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(lines, file="books/x.txt"))
    emits = _emits(processor, SPLIT_VNODE)
    dead = [record for stream, record in emits if stream == "dead_letter"]
    assert [(d["partition"], d["offset"]) for d in dead] == [(-1, 0), (-1, 1)]
    assert all("file books/x.txt record" in d["error"] for d in dead)
    assert dead[0]["event"] == "not json"
    assert [s for s, _ in emits].count(EXCHANGE) == 1
    assert processor.figures()["dead_letters"] == 2


def test_under_the_stop_policy_a_raising_flat_map_stops_the_job() -> None:
    processor = _processor("stop")
    processor.restore(SPLIT_VNODE, None)
    lines = [json.dumps({"no_text": 1}).encode()]
    with pytest.raises(StepFailed, match=r"file books/a\.txt record 0"):
        processor.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(lines))
    with pytest.raises(Refused):
        processor.capture((SPLIT_VNODE,))


async def _deliver_and_read(
    routed: list[dict[str, Any]], deliveries: list[tuple[int, int]]
) -> dict[int, list[bytes]]:
    """Append `routed` once per (checkpoint, node) of `deliveries` (repeats included) and
    return each partition's records as the log holds them."""
    store = open_store("memory://")
    clock = RealClock()
    deadline = clock.monotonic() + 60.0
    writer = ExchangeWriter(store, clock, P)
    for checkpoint_id, node_id in deliveries:
        await writer.deliver(Delivery("words", checkpoint_id, node_id, routed), deadline=deadline)
    return await _log_records(store)


async def _log_records(store: ObjectStore) -> dict[int, list[bytes]]:
    """Each record log partition's records, as the log holds them."""
    log, deadline = EventLog(store), RealClock().monotonic() + 60.0
    ends = await log.end_offsets(range(P), deadline=deadline)
    out = {}
    for partition, end in ends.items():
        if end:
            records, _ = await log.read_records(partition, 0, end, deadline=deadline)
            out[partition] = [bytes(r) for r in records]
    return out


def _count_through_log(deliveries: list[tuple[int, int]]) -> Counter[str]:
    """Route two lines, deliver as `deliveries` says, run the second stage over the log."""
    first = _processor()
    first.restore(SPLIT_VNODE, None)
    first.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines("a b c a", "c a")))
    routed = [record for _, record in _emits(first, SPLIT_VNODE)]
    partitions = asyncio.run(_deliver_and_read(routed, deliveries))
    second = _processor()
    counts: Counter[str] = Counter()
    for partition, records in partitions.items():
        vnode = partition % 256
        second.restore(vnode, None)
        second.process(vnode, partition, SourceBatch(0, len(records), records))
        for stream, record in _emits(second, vnode):
            assert stream == "main"
            counts[record["word"]] = max(counts[record["word"]], record["count"])
    return counts


def test_fs3_a_delivery_appended_again_is_applied_once_by_the_keyed_steps() -> None:
    once = _count_through_log([(5, 1)])
    assert once == Counter({"a": 3, "c": 2, "b": 1})
    assert _count_through_log([(5, 1), (5, 1)]) == once  # a repeated delivery
    assert _count_through_log([(5, 1), (6, 1), (5, 1), (6, 1)]) == Counter(
        {"a": 6, "c": 4, "b": 2}
    )  # two deliveries, then both again (a new leader restarting from checkpoint 5)


def test_fs3_the_last_tags_are_cut_and_restored_with_the_vnode_state() -> None:
    first = _processor()
    first.restore(SPLIT_VNODE, None)
    first.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines("a")))
    first.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines("a"), seq=1))
    routed = [record for _, record in _emits(first, SPLIT_VNODE)]  # a group per batch
    partition = key_hash("a") % P
    vnode = partition % 256
    records = asyncio.run(_deliver_and_read(routed, [(3, 2), (3, 2)]))[partition]
    assert len(records) == 4  # the delivery twice in the log
    before = _processor()
    before.restore(vnode, None)
    before.process(vnode, partition, SourceBatch(0, 2, records[:2]))
    state = before.capture((vnode,))().states[vnode]
    after = _processor()  # a restore elsewhere from that cut, reading on from offset 2
    after.restore(vnode, state)
    after.process(vnode, partition, SourceBatch(2, 4, records[2:]))
    assert [r for _, r in _emits(after, vnode)] == []  # the repeats applied nothing
    assert unwrap_state(state, what="test")[1] == {partition: (3, 2, 1)}


def test_a_state_that_is_not_a_repartitioned_jobs_is_corrupt() -> None:
    assert unwrap_state(wrap_state(b"run", {3: (1, 2, 3)}), what="t") == (b"run", {3: (1, 2, 3)})
    with pytest.raises(CorruptRecord, match="not a repartitioned job's vnode state"):
        unwrap_state(b"\x01garbage", what="t")


def test_file_records_wait_while_the_routed_events_not_yet_committed_are_at_their_budget() -> None:
    processor = _processor()
    processor.restore(SPLIT_VNODE, None)
    word = "x" * 1_000
    lines = _lines(*(f"{word}{n}" for n in range(ROUTED_PENDING_BYTES_MAX // 1_000)))
    processor.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(lines))
    assert not processor.routing_room()  # over 16 MiB pending: no more file records are read
    processor.capture((SPLIT_VNODE,))()
    processor.abort_output(SPLIT_VNODE)
    assert not processor.routing_room()  # an aborted cut leaves them pending
    processor.capture((SPLIT_VNODE,))()
    processor.commit_output(SPLIT_VNODE)
    assert processor.routing_room()  # committed: history


async def _deliver_racing(
    url: str, deliveries: dict[int, list[dict[str, Any]]], seeds: tuple[int, ...]
) -> tuple[ObjectStore, int]:
    """Each checkpoint's groups (node 1) delivered by as many racing deliverers as `seeds`,
    each over its own fault-injecting client of one store, each following the deliverer's
    rule: from `delivered_through` (inclusive) in order, and after any failure from there
    again. The store and the faults injected."""
    inner = open_store(url)
    clock = RealClock()
    config = FaultConfig(
        error_before_rate=0.1,
        error_after_rate=0.1,
        conflict_after_rate=0.05,
        latency_s_min=0.0005,
        latency_s_max=0.003,  # the deliverers' requests interleave
    )
    faults = 0

    async def deliverer(seed: int) -> None:
        nonlocal faults
        faulty = FaultyStore(inner, clock=clock, seed=seed, config=config)
        writer = ExchangeWriter(faulty, clock, P)
        try:
            await _deliver_all(writer, deliveries)
        finally:
            faults += sum(faulty.stats.injected.values())

    async def _deliver_all(
        writer: ExchangeWriter, deliveries: dict[int, list[dict[str, Any]]]
    ) -> None:
        for _ in range(500):
            deadline = clock.monotonic() + 30.0
            try:
                start = await writer.delivered_through("words", deadline=deadline) or 0
                for checkpoint_id in sorted(c for c in deliveries if c >= start):
                    groups = deliveries[checkpoint_id]
                    delivery = Delivery("words", checkpoint_id, 1, groups)
                    await writer.deliver(delivery, deadline=deadline)
                return
            except LaminarError:  # a failure or a lost race: again from where the log stands
                await asyncio.sleep(0)
        raise AssertionError("a deliverer did not finish in 500 attempts")

    await asyncio.gather(*(deliverer(seed) for seed in seeds))
    return inner, faults


def test_fs3_racing_deliverers_under_injected_faults_apply_each_event_once(tmp_path: Path) -> None:
    texts = {1: ("a b c a", "d e"), 2: ("a a f", "g b"), 3: ("c c c", "h a")}
    deliveries = {}
    for checkpoint_id, lines in texts.items():
        router = _processor()
        router.restore(SPLIT_VNODE, None)
        router.process(SPLIT_VNODE, P + SPLIT_VNODE, _split_batch(_lines(*lines)))
        deliveries[checkpoint_id] = [group for _, group in _emits(router, SPLIT_VNODE)]
    expected = Counter(" ".join(" ".join(lines) for lines in texts.values()).split())

    for seeds in ((1, 2), (3, 4, 5)):
        url = f"file://{tmp_path}/store-{len(seeds)}?fsync=false"
        store, faults = asyncio.run(_deliver_racing(url, deliveries, seeds))
        partitions = asyncio.run(_log_records(store))
        assert faults > 0  # requests failed, before or after they applied
        # every deliverer appended at least the last checkpoint: groups are in the log twice
        assert sum(len(r) for r in partitions.values()) > sum(map(len, deliveries.values()))
        keyed = _processor()
        counts: Counter[str] = Counter()
        for partition, records in partitions.items():
            keyed.restore(partition % 256, None)
            keyed.process(partition % 256, partition, SourceBatch(0, len(records), records))
            for _, record in _emits(keyed, partition % 256):
                counts[record["word"]] = max(counts[record["word"]], record["count"])
        assert counts == expected  # appended more than once, applied once
