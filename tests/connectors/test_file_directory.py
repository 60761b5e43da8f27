"""The file sinks' targets (docs/protocols/file-sink.md, "Targets", FD-1 .. FD-3): a plain local
directory that DuckDB reads in place, and a separate S3 bucket that DuckDB reads in place
through s3fs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors import file_directory as directory_module
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from tests.connectors import directory_workers
from tests.connectors.support import (
    JOB,
    canonical,
    deadline,
    delivery,
    duckdb_rows,
    records_of,
)
from tests.support.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

PREFIX = "out/clicks/"
Sink = ParquetSink | JsonLinesSink
SINKS: list[Callable[..., Sink]] = [ParquetSink, JsonLinesSink]
CHECKPOINTS = (3, 4, 7)
NODES = (1, 2, 17)


def extension(sink: Sink) -> str:
    return "parquet" if isinstance(sink, ParquetSink) else "jsonl"


def reader(sink: Sink) -> str:
    return "read_parquet" if isinstance(sink, ParquetSink) else "read_ndjson"


def relative_files(root: Path) -> list[str]:
    """Every file under `root` (temp files included), as sorted relative paths."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def expected_files(sink: Sink, ids: list[tuple[int, int]]) -> list[str]:
    return sorted(f"{PREFIX}checkpoint={c:020d}/node={n:020d}.{extension(sink)}" for c, n in ids)


def visible(root: Path, sink: Sink) -> list[str]:
    """The files DuckDB's glob of this sink's files finds."""
    found = duckdb_rows("SELECT file FROM glob(?)", f"{root}/{PREFIX}**/*.{extension(sink)}")
    return sorted(str(Path(row["file"]).relative_to(root)) for row in found)


def cluster_store(file_url: str) -> CountingStore:
    return CountingStore(open_store(file_url))


@pytest.mark.parametrize("as_url", [True, False], ids=["file-url", "plain-path"])
@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fd1_duckdb_reads_the_plain_directory_in_place(
    make_sink: Callable[..., Sink], as_url: bool, tmp_path: Path, file_url: str
) -> None:
    root = tmp_path / "plain"
    sink = make_sink(PREFIX, url=f"file://{root}" if as_url else str(root))
    deliveries = [delivery(c, n, count=n + 2) for c in CHECKPOINTS for n in NODES]

    async def run() -> int | None:
        store = cluster_store(file_url)
        writer = sink.open(store, RealClock())
        assert [await writer.deliver(d, deadline=deadline()) for d in deliveries] == [True] * 9
        assert store.total == 0  # nothing went to the cluster's store
        return await writer.delivered_through(JOB, deadline=deadline())

    assert asyncio.run(run()) == max(CHECKPOINTS)
    ids = [(c, n) for c in CHECKPOINTS for n in NODES]
    assert relative_files(root) == expected_files(sink, ids)  # no temp file left
    pattern = f"{root}/{PREFIX}**/*.{extension(sink)}"
    rows = duckdb_rows(
        f"SELECT * FROM {reader(sink)}(?, union_by_name=true, hive_partitioning=false)", pattern
    )
    expected = [dict(r) for d in deliveries for r in d.records]
    assert canonical(rows) == canonical(expected)
    totals = duckdb_rows(
        f"SELECT checkpoint, sum(clicks) AS clicks FROM {reader(sink)}(?, union_by_name=true) "
        "GROUP BY checkpoint ORDER BY checkpoint",
        pattern,
    )
    by_checkpoint: dict[int, int] = {}
    for d in deliveries:
        clicks = sum(r["clicks"] for r in d.records)
        by_checkpoint[d.checkpoint_id] = by_checkpoint.get(d.checkpoint_id, 0) + clicks
    assert [(int(r["checkpoint"]), r["clicks"]) for r in totals] == sorted(by_checkpoint.items())


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fd2_replay_returns_false_and_leaves_one_file_with_the_first_bytes(
    make_sink: Callable[..., Sink], tmp_path: Path, file_url: str
) -> None:
    root = tmp_path / "plain"
    sink = make_sink(PREFIX, url=f"file://{root}")

    async def run() -> None:
        store = open_store(file_url)
        assert await sink.open(store, RealClock()).deliver(delivery(5, 2), deadline=deadline())
        path = root / expected_files(sink, [(5, 2)])[0]
        body = path.read_bytes()
        again = sink.open(store, RealClock())  # a restarted deliverer
        assert not await again.deliver(delivery(5, 2), deadline=deadline())
        other = Delivery(JOB, 5, 2, records_of(5, 2, count=9))
        assert not await again.deliver(other, deadline=deadline())
        assert relative_files(root) == expected_files(sink, [(5, 2)])
        assert path.read_bytes() == body

    asyncio.run(run())


@pytest.mark.processes
@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fd1_duplicate_deliveries_racing_in_two_processes_create_one_file_and_one_true(
    make_sink: Callable[..., Sink], tmp_path: Path
) -> None:
    root = tmp_path / "plain"
    sink = make_sink(PREFIX)
    ids = [(c, n) for c in (1, 2, 3) for n in (1, 2, 3, 4)]
    parquet = isinstance(sink, ParquetSink)
    outcomes = directory_workers.race(2, f"file://{root}", PREFIX, parquet, ids)
    assert [error for _, _, error in outcomes] == [None, None]
    applied = [sum(column) for column in zip(*(a for _, a, _ in outcomes), strict=True)]
    assert applied == [1] * len(ids)  # exactly one process got True for each delivery
    assert relative_files(root) == expected_files(sink, ids)  # one file each, no temp file


class SimulatedCrash(Exception):
    """The deliverer dies between writing the temp file and linking it."""


def crash_after_the_temp_write(temp: str, path: str) -> bool:
    assert os.path.getsize(temp) > 0  # the whole temp file is written and synced
    raise SimulatedCrash(path)


@pytest.mark.parametrize("make_sink", SINKS, ids=["parquet", "jsonl"])
def test_fd3_a_crash_between_temp_write_and_link_leaves_no_visible_file_and_a_retry_delivers(
    make_sink: Callable[..., Sink], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "plain"
    sink = make_sink(PREFIX, url=str(root))
    store = open_store("memory://")

    async def run() -> None:
        with monkeypatch.context() as patch:
            patch.setattr(directory_module, "_link", crash_after_the_temp_write)
            patch.setattr(directory_module, "_unlink_quietly", lambda path: None)  # no cleanup
            with pytest.raises(SimulatedCrash):
                await sink.open(store, RealClock()).deliver(delivery(6, 1), deadline=deadline())
        [leftover] = relative_files(root)  # what a crash leaves: the dot-temp file only
        assert Path(leftover).name.startswith(".node=") and leftover.endswith(".tmp")
        assert visible(root, sink) == []
        writer = sink.open(store, RealClock())  # the restarted deliverer
        assert await writer.delivered_through(JOB, deadline=deadline()) is None
        assert await writer.deliver(delivery(6, 1), deadline=deadline())
        assert visible(root, sink) == expected_files(sink, [(6, 1)])
        assert leftover in relative_files(root)  # young: a live writer's, perhaps
        old_s = (RealClock().wall_ms() - directory_module.TEMP_AGE_MS_MAX) / 1000 - 60
        os.utime(root / leftover, (old_s, old_s))
        assert await writer.deliver(delivery(6, 2), deadline=deadline())  # same directory
        assert relative_files(root) == expected_files(sink, [(6, 1), (6, 2)])

    asyncio.run(run())


def test_fd3_an_error_after_the_temp_write_removes_the_temp_file_and_a_retry_delivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "plain"
    sink = ParquetSink(PREFIX, url=str(root))
    writer = sink.open(open_store("memory://"), RealClock())

    async def run() -> None:
        with monkeypatch.context() as patch:
            patch.setattr(directory_module, "_link", crash_after_the_temp_write)
            with pytest.raises(SimulatedCrash):
                await writer.deliver(delivery(6, 1), deadline=deadline())
        assert relative_files(root) == []
        assert await writer.deliver(delivery(6, 1), deadline=deadline())
        assert relative_files(root) == expected_files(sink, [(6, 1)])

    asyncio.run(run())


def test_fd_delivered_through_ignores_empty_deliveries_foreign_names_and_temp_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "plain"
    sink = JsonLinesSink(PREFIX, url=str(root))

    async def run() -> None:
        writer = sink.open(open_store("memory://"), RealClock())
        assert await writer.delivered_through(JOB, deadline=deadline()) is None
        assert not await writer.deliver(Delivery(JOB, 9, 1, []), deadline=deadline())
        assert not root.exists()  # an empty delivery writes nothing, not even a directory
        base = root / PREFIX
        for name in (
            f"checkpoint={99:020d}/.node={1:020d}.jsonl.0.tmp",  # a crashed writer's temp
            f"checkpoint={98:020d}/node={1:020d}.parquet",  # another format
            f"checkpoint={97:020d}/node={0:020d}.jsonl",  # node 0 is no node
            "checkpoint=96/node=1.jsonl",  # not zero-padded
            f"checkpoint={95:020d}/_SUCCESS",
            "_SUCCESS",
        ):
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_text("x")
        (base / f"checkpoint={99:020d}" / "node=00000000000000000002.jsonl").mkdir()
        assert await writer.delivered_through(JOB, deadline=deadline()) is None
        for checkpoint_id in (2, 11, 6):
            assert await writer.deliver(delivery(checkpoint_id, 3), deadline=deadline())
        assert await writer.delivered_through(JOB, deadline=deadline()) == 11

    asyncio.run(run())


def test_fd_a_passed_deadline_is_deadline_exceeded_and_writes_nothing(tmp_path: Path) -> None:
    writer = ParquetSink(PREFIX, url=str(tmp_path / "plain")).open(
        open_store("memory://"), RealClock()
    )
    with pytest.raises(DeadlineExceeded):
        asyncio.run(writer.deliver(delivery(1, 1), deadline=RealClock().monotonic() - 1))
    assert not (tmp_path / "plain").exists()


BAD_URLS = [
    ("", "non-empty"),
    ("memory://", "no sink target"),
    ("http://example.com/x", "no sink target"),
    ("relative/dir", "no sink target"),
    ("/", "absolute path other than /"),
    ("file:///", "absolute directory path other than /"),
    ("file://host/data", "local path"),
    ("file:///data/out?fsync=false", "write file:///data/out"),
    ("/data/../etc", "write /etc"),
    ("s3://", "write s3://bucket"),
    ("s3:///x?secret_access_key=hunter2", "write s3://bucket"),
]


@pytest.mark.parametrize(("url", "hint"), BAD_URLS)
def test_a_url_that_names_no_target_is_refused_at_declaration_in_one_line(
    url: str, hint: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        JsonLinesSink(PREFIX, url=url)
    message = str(raised.value)
    assert hint in message and "\n" not in message and "hunter2" not in message


def test_a_sink_with_a_url_describes_it_without_secrets() -> None:
    url = "s3://bucket/base?region=eu&access_key_id=AK&secret_access_key=hunter2"
    sink = ParquetSink(PREFIX, url=url)
    assert sink.describe().startswith("Parquet files under out/clicks/ in s3://bucket/base?")
    assert "hunter2" not in sink.describe() and "hunter2" not in repr(sink)
    assert JsonLinesSink(PREFIX, url="file:///data/out").describe() == (
        "JSON Lines files under out/clicks/ in file:///data/out (stream main)"
    )


@pytest.mark.s3
def test_fo1_duckdb_reads_the_parquet_objects_in_a_separate_bucket_in_place(
    s3_server: S3Server,
) -> None:
    """DuckDB reads the objects as they lie in the bucket through s3fs (its httpfs extension
    cannot be downloaded here); the cluster's own store receives nothing."""
    import duckdb
    import s3fs  # type: ignore[import-untyped]  # the `test` extra

    bucket = s3_server.create_bucket()
    sink = ParquetSink(PREFIX, url=s3_server.url(bucket))
    deliveries = [delivery(c, n, count=n + 2) for c in CHECKPOINTS for n in NODES]

    async def run(store: ObjectStore) -> int | None:
        writer = sink.open(store, RealClock())
        assert [await writer.deliver(d, deadline=deadline()) for d in deliveries] == [True] * 9
        assert not await writer.deliver(deliveries[0], deadline=deadline())  # a replay
        through = await writer.delivered_through(JOB, deadline=deadline())
        await writer.close()
        await writer.close()  # idempotent
        return through

    cluster = CountingStore(open_store("memory://"))
    assert asyncio.run(run(cluster)) == max(CHECKPOINTS)
    assert cluster.total == 0
    fs = s3fs.S3FileSystem(
        endpoint_url=s3_server.endpoint,
        key=ACCESS_KEY,
        secret=SECRET_KEY,
        client_kwargs={"region_name": REGION},
    )
    with duckdb.connect() as connection:
        connection.register_filesystem(fs)
        result = connection.execute(
            "SELECT * FROM read_parquet(?, union_by_name=true, hive_partitioning=false)",
            [f"s3://{bucket}/{PREFIX}**/*.parquet"],
        )
        names = [column[0] for column in result.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    assert canonical(rows) == canonical([dict(r) for d in deliveries for r in d.records])
