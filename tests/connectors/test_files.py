"""The exactly-once file sinks (docs/protocols/file-sink.md, FO-1 .. FO-5), on the real
file:// store (and moto S3), read back with DuckDB."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors import files as files_module
from laminar_cluster.connectors.delivery import Delivery, SinkWriter
from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, ObjectAlreadyExists
from laminar_cluster.store import CREATE, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.connectors.support import (
    JOB,
    canonical,
    deadline,
    delivery,
    duckdb_rows,
    export,
    read_json_lines,
    read_parquet,
    records_of,
)
from tests.support.scripted_store import ScriptedStore

PREFIX = "out/clicks/"
Sink = ParquetSink | JsonLinesSink
SINKS: list[Callable[[str], Sink]] = [ParquetSink, JsonLinesSink]
READERS = {"parquet": read_parquet, "jsonl": read_json_lines}
CHECKPOINTS = (3, 4, 7)
NODES = (1, 2, 17)


def extension(sink: Sink) -> str:
    return "parquet" if isinstance(sink, ParquetSink) else "jsonl"


def key_of(sink: Sink, checkpoint_id: int, node_id: int) -> str:
    return f"{sink.prefix}checkpoint={checkpoint_id:020d}/node={node_id:020d}.{extension(sink)}"


async def deliver_all(writer: SinkWriter, deliveries: list[Delivery]) -> list[bool]:
    return [await writer.deliver(d, deadline=deadline()) for d in deliveries]


async def round_trip(store: ObjectStore, sink: Sink, tmp_path: Path) -> None:
    """Deliver several nodes' output of several checkpoints; DuckDB reads exactly it back."""
    writer = sink.open(store, RealClock())
    deliveries = [delivery(c, n, count=n + 2) for c in CHECKPOINTS for n in NODES]
    assert await deliver_all(writer, deliveries) == [True] * len(deliveries)
    keys = await export(store, sink.prefix, tmp_path / "export")
    assert keys == sorted(key_of(sink, c, n) for c in CHECKPOINTS for n in NODES)
    expected = [r for d in deliveries for r in d.records]
    rows = READERS[extension(sink)](tmp_path / "export")
    assert canonical(rows) == canonical([dict(r) for r in expected])
    total = duckdb_rows(
        f"SELECT user, sum(clicks) AS clicks FROM {_reader_call(sink)} GROUP BY user ORDER BY user",
        f"{tmp_path / 'export'}/**/*.{extension(sink)}",
    )
    by_user: dict[str, int] = {}
    for record in expected:
        by_user[record["user"]] = by_user.get(record["user"], 0) + record["clicks"]
    assert [(r["user"], r["clicks"]) for r in total] == sorted(by_user.items())
    assert await writer.delivered_through(JOB, deadline=deadline()) == max(CHECKPOINTS)


def _reader_call(sink: Sink) -> str:
    function = "read_parquet" if isinstance(sink, ParquetSink) else "read_ndjson"
    return f"{function}(?, union_by_name=true)"  # hive partitioning on: a checkpoint column


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fo1_deliveries_are_one_file_each_and_duckdb_reads_the_records_back(
    make_sink: Callable[[str], Sink], file_url: str, tmp_path: Path
) -> None:
    store = open_store(file_url)
    asyncio.run(round_trip(store, make_sink(PREFIX), tmp_path))
    root = Path(file_url.removeprefix("file://").split("?")[0])
    on_disk = sorted(
        str(p.relative_to(root / "objects")) for p in (root / "objects").rglob("*") if p.is_file()
    )
    sink = make_sink(PREFIX)
    assert on_disk == sorted(key_of(sink, c, n) for c in CHECKPOINTS for n in NODES)
    assert list((root / "tmp").iterdir()) == []  # FO-1: no temp file left behind


@pytest.mark.s3
@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fo1_deliveries_to_s3_read_back_by_duckdb(
    make_sink: Callable[[str], Sink], s3_url: str, tmp_path: Path
) -> None:
    asyncio.run(round_trip(open_store(s3_url), make_sink(PREFIX), tmp_path))


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fo2_replay_returns_false_and_the_first_file_stays(
    make_sink: Callable[[str], Sink], file_url: str
) -> None:
    async def run() -> None:
        store = open_store(file_url)
        sink = make_sink(PREFIX)
        first = delivery(5, 2)
        assert await sink.open(store, RealClock()).deliver(first, deadline=deadline())
        key = key_of(sink, 5, 2)
        body = (await store.get(key)).body
        again = sink.open(store, RealClock())  # a restarted deliverer
        assert not await again.deliver(first, deadline=deadline())
        other_bytes = Delivery(JOB, 5, 2, records_of(5, 2, count=9))
        assert not await again.deliver(other_bytes, deadline=deadline())
        assert [m.key for m in await store.list(PREFIX)] == [key]
        assert (await store.get(key)).body == body

    asyncio.run(run())


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fo3_empty_delivery_writes_nothing(make_sink: Callable[[str], Sink], file_url: str) -> None:
    async def run() -> None:
        store = CountingStore(open_store(file_url))
        writer = make_sink(PREFIX).open(store, RealClock())
        assert not await writer.deliver(Delivery(JOB, 9, 1, []), deadline=deadline())
        assert store.total == 0
        assert await store.list("") == []
        assert await writer.delivered_through(JOB, deadline=deadline()) is None

    asyncio.run(run())


def test_fo4_delivered_through_is_the_newest_checkpoint_ignoring_foreign_keys(
    file_url: str,
) -> None:
    async def run() -> None:
        store = open_store(file_url)
        sink = ParquetSink(PREFIX)
        writer = sink.open(store, RealClock())
        assert await writer.delivered_through(JOB, deadline=deadline()) is None
        for foreign in (
            f"{PREFIX}_SUCCESS",
            f"{PREFIX}checkpoint=9/node=1.parquet",  # not zero-padded
            f"{PREFIX}checkpoint={99:020d}/node={1:020d}.jsonl",  # another format
            f"{PREFIX}checkpoint={99:020d}/node={0:020d}.parquet",  # node 0 is no node
            f"{PREFIX}checkpoint={98:020d}/notes.txt",
        ):
            await store.put(foreign, b"x", CREATE)
        assert await writer.delivered_through(JOB, deadline=deadline()) is None
        for checkpoint_id in (2, 11, 6):
            await writer.deliver(delivery(checkpoint_id, 3), deadline=deadline())
        assert await writer.delivered_through(JOB, deadline=deadline()) == 11

    asyncio.run(run())


@pytest.mark.parametrize(
    "checkpoints",
    [(1, 2, 3, 4, 5, 6, 7), (5, 2**40, 2**40 + 1, 2**63), (1, 2, 3, 2**64 - 1)],
    ids=["dense", "sparse", "u64-max"],
)
def test_fo4_delivered_through_searches_a_prefix_longer_than_one_page(
    checkpoints: tuple[int, ...], file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "LIST_PAGE_KEYS", 3)
    monkeypatch.setattr(files_module, "PROBE_KEYS", 2)

    async def run() -> None:
        inner = open_store(file_url)
        await inner.put(f"{PREFIX}checkpoint={3:020d}/_SUCCESS", b"x", CREATE)
        writer = JsonLinesSink(PREFIX).open(inner, RealClock())
        for checkpoint_id in checkpoints:
            for node_id in (1, 2):
                await writer.deliver(delivery(checkpoint_id, node_id, 1), deadline=deadline())
        store = CountingStore(inner)
        fresh = JsonLinesSink(PREFIX).open(store, RealClock())
        assert await fresh.delivered_through(JOB, deadline=deadline()) == max(checkpoints)
        assert store.requests["list"] <= 1 + files_module.SEARCH_PROBES_MAX

    asyncio.run(run())


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fo5_concurrent_duplicate_deliveries_create_one_object(
    make_sink: Callable[[str], Sink], file_url: str
) -> None:
    async def run() -> None:
        sink = make_sink(PREFIX)
        writers = [sink.open(open_store(file_url), RealClock()) for _ in range(4)]
        deliveries = [delivery(c, n) for c in (1, 2) for n in (1, 2, 3)]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(deliver_all(w, deliveries)) for w in writers]
        applied = [sum(column) for column in zip(*(t.result() for t in tasks), strict=True)]
        assert applied == [1] * len(deliveries)  # exactly one writer applied each delivery
        keys = [m.key for m in await open_store(file_url).list(PREFIX)]
        assert keys == sorted(key_of(sink, d.checkpoint_id, d.node_id) for d in deliveries)

    asyncio.run(run())


@pytest.mark.parametrize(
    "kind", [FaultKind.BEFORE, FaultKind.AFTER, FaultKind.PHANTOM_CONFLICT], ids=str
)
def test_fo2_create_with_a_lost_or_refused_request_is_retried_and_applied_once(
    kind: FaultKind, file_url: str
) -> None:
    async def run() -> None:
        clock = RealClock()
        store = FaultyStore(open_store(file_url), clock=clock, seed=1)
        store.fail_next(kind, op="put", key_prefix=PREFIX)
        if kind is FaultKind.AFTER:
            store.fail_next(FaultKind.BEFORE, op="get", key_prefix=PREFIX)  # read-back fails too
        writer = ParquetSink(PREFIX).open(store, clock)
        assert await writer.deliver(delivery(4, 1), deadline=deadline())
        assert [m.key for m in await store.list(PREFIX)] == [key_of(ParquetSink(PREFIX), 4, 1)]
        assert not await writer.deliver(delivery(4, 1), deadline=deadline())

    asyncio.run(run())


def test_fo2_a_create_lost_before_it_landed_is_made_again_and_the_late_request_fails(
    file_url: str,
) -> None:
    async def run() -> None:
        store = ScriptedStore(open_store(file_url))
        store.defer_next_put(PREFIX)  # WriteOutcomeUnknown, and nothing written yet
        writer = JsonLinesSink(PREFIX).open(store, RealClock())
        assert await writer.deliver(delivery(4, 1), deadline=deadline())
        key = key_of(JsonLinesSink(PREFIX), 4, 1)
        body = (await store.get(key)).body
        with pytest.raises(ObjectAlreadyExists):
            await store.deferred[0].apply()  # the lost request arrives late: no second file
        assert (await store.get(key)).body == body
        assert [m.key for m in await store.list(PREFIX)] == [key]

    asyncio.run(run())


BAD_PREFIXES = [
    "",
    "out",
    "/out/",
    "out/../x/",
    "out/./x/",
    "a//b/",
    "out\\x/",
    "checkpoints/out/",
    "control/",
    "membership/sink/",
    "assignment/",
    "events/x/",
    "event-log-ends/",
    "checkpoint-outcomes/x/",
    "checkpoint-future-thing/",
    "bench/x/",
]


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_bad_prefix_is_refused_with_a_message_naming_it(
    make_sink: Callable[[str], Sink], prefix: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        make_sink(prefix)
    assert f"sink prefix {prefix!r}" in str(raised.value)


def test_every_prefix_the_cluster_writes_under_is_refused() -> None:
    from laminar_cluster.assignment import paths as assignment_paths
    from laminar_cluster.checkpoint import paths as checkpoint_paths
    from laminar_cluster.connectors import eventlog_ends, eventlog_segments
    from laminar_cluster.coordinator import paths as coordinator_paths
    from laminar_cluster.lease import paths as lease_paths
    from laminar_cluster.membership import paths as membership_paths

    modules = (assignment_paths, checkpoint_paths, coordinator_paths, lease_paths)
    modules += (membership_paths, eventlog_ends, eventlog_segments)
    names = [getattr(m, n) for m in modules for n in dir(m) if n.endswith(("_PREFIX", "_PATH"))]
    cluster_paths = [p for p in names if isinstance(p, str) and "/" in p]
    assert len(cluster_paths) >= 15
    for path in cluster_paths:
        top = path.split("/")[0]
        with pytest.raises(InvalidArgument):
            ParquetSink(f"{top}/my-sink/")


def test_parquet_refuses_a_field_without_one_type_and_writes_nothing(file_url: str) -> None:
    async def run() -> None:
        store = open_store(file_url)
        writer = ParquetSink(PREFIX).open(store, RealClock())
        mixed = Delivery(JOB, 1, 1, [{"v": 1}, {"v": "one"}])
        with pytest.raises(InvalidArgument, match="'v'"):
            await writer.deliver(mixed, deadline=deadline())
        assert await store.list("") == []
        json_writer = JsonLinesSink(PREFIX).open(store, RealClock())
        assert await json_writer.deliver(mixed, deadline=deadline())  # JSON Lines takes them

    asyncio.run(run())


def test_json_lines_are_utf8_one_object_per_line_in_emit_order(file_url: str) -> None:
    async def run() -> None:
        store = open_store(file_url)
        records = [{"name": "Zoë", "n": 2}, {"name": "a\nb", "n": 1}, {"n": 3}]
        await (
            JsonLinesSink(PREFIX)
            .open(store, RealClock())
            .deliver(Delivery(JOB, 1, 1, records), deadline=deadline())
        )
        body = (await store.get(key_of(JsonLinesSink(PREFIX), 1, 1))).body
        assert body == ('{"name":"Zoë","n":2}\n{"name":"a\\nb","n":1}\n{"n":3}\n'.encode())

    asyncio.run(run())


def test_a_writer_refuses_a_second_job(file_url: str) -> None:
    async def run() -> None:
        writer = ParquetSink(PREFIX).open(open_store(file_url), RealClock())
        await writer.deliver(delivery(1, 1), deadline=deadline())
        with pytest.raises(InvalidArgument, match="share a sink prefix"):
            await writer.deliver(Delivery("other", 2, 1, [{"a": 1}]), deadline=deadline())
        with pytest.raises(InvalidArgument, match="share a sink prefix"):
            await writer.delivered_through("other", deadline=deadline())

    asyncio.run(run())


def test_a_passed_deadline_is_deadline_exceeded_and_writes_nothing(file_url: str) -> None:
    async def run() -> None:
        store = open_store(file_url)
        writer = ParquetSink(PREFIX).open(store, RealClock())
        with pytest.raises(DeadlineExceeded):
            await writer.deliver(delivery(1, 1), deadline=RealClock().monotonic() - 1)
        assert await store.list("") == []

    asyncio.run(run())


def test_sink_declarations_describe_themselves_and_are_frozen() -> None:
    sink = JsonLinesSink("out/late/", stream="late")
    assert sink.describe() == "JSON Lines files under out/late/ (stream late)"
    assert ParquetSink(PREFIX).describe() == "Parquet files under out/clicks/ (stream main)"
    with pytest.raises(AttributeError):
        sink.prefix = "x/"  # type: ignore[misc]
