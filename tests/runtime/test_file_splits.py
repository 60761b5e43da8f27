"""`FileSplits` and `SplitLog` (runtime/file_splits.py) on the real file:// store: each vnode's
files read in catalog order by offset `seq << 32 | record`, unreadable files as one dead-letter
record, the catalog refreshed at most once per interval (simulated clock), and the split log's
partitions and quiescence."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_segments import LogLayout
from laminar_cluster.connectors.file_catalog import FileCatalog, discover, vnode_of_file
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.runtime.file_splits import FileRecords, FileSplits, SplitLog, split_offset
from laminar_cluster.store import CREATE, OVERWRITE, open_store
from laminar_cluster.store.counting import CountingStore

PREFIX = "in/"
P = 256
INTERVAL_S = 10.0


def name_in(vnode: int, extension: str, skip: int = 0) -> str:
    """A file name under PREFIX of `vnode` (the `skip`-th such name) ending in `extension`."""
    for i in range(100_000):
        name = f"{PREFIX}f{i:05d}{extension}"
        if vnode_of_file(name) == vnode:
            if skip == 0:
                return name
            skip -= 1
    raise AssertionError(f"no name in vnode {vnode}")


def jsonl(*values: int) -> bytes:
    return b"".join(b'{"v": %d}\n' % v for v in values)


def records(*values: int) -> list[bytes]:
    return [b'{"v":%d}' % v for v in values]


class Fixture:
    """A cluster store holding the catalog (its requests counted), a source store holding the
    files, a simulated clock, and the catalog's writer (the leader's discovery)."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = SimulatedClock()
        self.cluster = CountingStore(open_store(f"file://{tmp_path}/cluster?fsync=false"))
        self.source = open_store(f"file://{tmp_path}/source?fsync=false")
        self.leader = FileCatalog(self.cluster, self.clock, PREFIX)

    def deadline(self) -> float:
        return self.clock.monotonic() + 30.0

    async def land(self, files: dict[str, bytes]) -> None:
        """Write the files (in order) and catalogue each alone, so seqs follow that order."""
        for name, body in files.items():
            await self.source.put(name, body, CREATE)
            await discover(self.leader, self.source, deadline=self.deadline())

    def splits(self, file_format: str | None = None) -> FileSplits:
        catalog = FileCatalog(self.cluster, self.clock, PREFIX)
        return FileSplits(
            catalog, self.source, self.clock, file_format=file_format, interval_s=INTERVAL_S
        )

    def seq(self, name: str) -> int:
        return [f.name for f in self.leader.files].index(name)


def test_fs2_a_vnode_reads_its_first_file_in_chunks_then_moves_past_its_end(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        first, second = name_in(7, ".jsonl"), name_in(7, ".jsonl", skip=1)
        await fx.land({first: jsonl(1, 2, 3, 4, 5), second: jsonl(6)})
        splits = fx.splits()
        seq = fx.seq(first)
        found, after = await splits.read(7, 0, 2, deadline=fx.deadline())
        assert found == FileRecords(first, seq, 0, records(1, 2))
        assert after == split_offset(seq, 2)
        found, after = await splits.read(7, after, 2, deadline=fx.deadline())
        assert found == FileRecords(first, seq, 2, records(3, 4))
        found, after = await splits.read(7, after, 2, deadline=fx.deadline())
        assert found == FileRecords(first, seq, 4, records(5))
        assert after == (seq + 1) << 32  # the file's end: the next file, record 0
        found, after = await splits.read(7, after, 100, deadline=fx.deadline())
        assert found == FileRecords(second, fx.seq(second), 0, records(6))
        assert after == split_offset(fx.seq(second) + 1, 0)
        assert await splits.read(7, after, 100, deadline=fx.deadline()) == (None, after)

    asyncio.run(main())


def test_a_whole_file_read_at_once_ends_at_the_next_seq(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        name = name_in(3, ".txt")
        await fx.land({name: b"to be\n\nor not\r\n"})
        found, after = await fx.splits().read(3, 0, 10, deadline=fx.deadline())
        assert found is not None
        assert [msgspec.json.decode(r) for r in found.records] == [
            {"text": "to be"},
            {"text": "or not"},
        ]
        assert after == split_offset(fx.seq(name) + 1, 0)

    asyncio.run(main())


def test_fs2_a_read_resumed_from_a_mid_file_offset_continues_exactly_there(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        other, name = name_in(9, ".jsonl"), name_in(5, ".jsonl")
        await fx.land({other: jsonl(0), name: jsonl(10, 11, 12, 13)})
        seq = fx.seq(name)
        restored = fx.splits()  # a new owner: nothing cached, the offset from a checkpoint
        found, after = await restored.read(5, split_offset(seq, 3), 10, deadline=fx.deadline())
        assert found == FileRecords(name, seq, 3, records(13))
        assert after == split_offset(seq + 1, 0)

    asyncio.run(main())


def test_a_vnode_skips_the_files_of_other_vnodes(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        a, b, c = name_in(7, ".jsonl"), name_in(8, ".jsonl"), name_in(7, ".jsonl", skip=1)
        await fx.land({a: jsonl(1), b: jsonl(2), c: jsonl(3)})
        splits = fx.splits()
        _, after = await splits.read(7, 0, 10, deadline=fx.deadline())
        assert after == split_offset(fx.seq(a) + 1, 0)
        found, after = await splits.read(7, after, 10, deadline=fx.deadline())
        assert found == FileRecords(c, fx.seq(c), 0, records(3))
        found, _ = await splits.read(8, 0, 10, deadline=fx.deadline())
        assert found == FileRecords(b, fx.seq(b), 0, records(2))
        # An offset inside another vnode's file starts this vnode's next file at record 0.
        found, _ = await splits.read(7, split_offset(fx.seq(b), 5), 10, deadline=fx.deadline())
        assert found == FileRecords(c, fx.seq(c), 0, records(3))

    asyncio.run(main())


def test_caught_up_exactly_when_no_catalogued_file_of_the_vnode_is_left(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        a, b = name_in(7, ".jsonl"), name_in(8, ".jsonl")
        await fx.land({a: jsonl(1, 2), b: jsonl(3)})
        splits = fx.splits()
        assert await splits.read(2, 0, 1, deadline=fx.deadline()) == (None, 0)
        seq = fx.seq(a)
        assert not splits.caught_up(7, 0)
        assert not splits.caught_up(7, split_offset(seq, 1))
        assert splits.caught_up(7, split_offset(seq + 1, 0))
        assert splits.caught_up(2, 0)  # a vnode without files
        assert not splits.caught_up(8, 0)

    asyncio.run(main())


async def one_record(fx: Fixture, splits: FileSplits, vnode: int, name: str) -> bytes:
    """The single record `vnode`'s split gives for the file `name`, checked to be its only one."""
    found, after = await splits.read(vnode, 0, 10, deadline=fx.deadline())
    assert found is not None and found.file == name
    assert after == split_offset(fx.seq(name) + 1, 0)
    assert len(found.records) == 1
    return bytes(found.records[0])


def is_dead_letter_naming(record: bytes, name: str) -> bool:
    try:
        value = msgspec.json.decode(record)
    except msgspec.DecodeError:
        value = None
    return not isinstance(value, dict) and name in record.decode()


def test_fs4_a_file_deleted_after_cataloguing_becomes_one_non_object_record(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        name = name_in(4, ".jsonl")
        await fx.land({name: jsonl(1, 2, 3)})
        await fx.source.delete(name)
        record = await one_record(fx, fx.splits(), 4, name)
        assert is_dead_letter_naming(record, name)

    asyncio.run(main())


def test_fs4_a_file_changed_after_cataloguing_becomes_one_non_object_record(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        name = name_in(4, ".jsonl")
        await fx.land({name: jsonl(1, 2, 3)})
        await fx.source.put(name, jsonl(1, 2, 3, 4), OVERWRITE)
        record = await one_record(fx, fx.splits(), 4, name)
        assert is_dead_letter_naming(record, name)

    asyncio.run(main())


def test_fs4_a_file_of_an_unknown_extension_becomes_one_non_object_record(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        name = name_in(6, ".dat")
        await fx.land({name: jsonl(1, 2)})
        record = await one_record(fx, fx.splits(), 6, name)
        assert is_dead_letter_naming(record, name)
        found, _ = await fx.splits("jsonl").read(6, 0, 10, deadline=fx.deadline())
        assert found is not None and list(found.records) == records(1, 2)  # a declared format

    asyncio.run(main())


def test_the_catalog_is_refreshed_at_most_once_per_interval(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        a, b = name_in(7, ".jsonl"), name_in(7, ".jsonl", skip=1)
        await fx.land({a: jsonl(1)})
        splits = fx.splits()
        fx.cluster.reset()
        _, after = await splits.read(7, 0, 10, deadline=fx.deadline())
        assert dict(fx.cluster.requests) == {"get": 3}  # page 0, then the absent pages 1 and 2
        fx.cluster.reset()
        await fx.land({b: jsonl(2)})
        fx.cluster.reset()
        for _ in range(5):  # within the interval: no GET, the new file not seen
            assert await splits.read(7, after, 10, deadline=fx.deadline()) == (None, after)
            assert await splits.poll(deadline=fx.deadline()) is False
        assert splits.caught_up(7, after)
        assert fx.cluster.total == 0
        fx.clock.advance(INTERVAL_S - 0.01)
        assert await splits.read(7, after, 10, deadline=fx.deadline()) == (None, after)
        assert fx.cluster.total == 0
        fx.clock.advance(0.01)
        found, _ = await splits.read(7, after, 10, deadline=fx.deadline())
        assert found == FileRecords(b, fx.seq(b), 0, records(2))
        assert dict(fx.cluster.requests) == {"get": 3}  # page 1, then the absent pages 2 and 3
        fx.clock.advance(INTERVAL_S)
        fx.cluster.reset()
        assert await splits.poll(deadline=fx.deadline()) is False
        assert dict(fx.cluster.requests) == {"get": 1}  # nothing new: one GET
        assert await splits.poll(deadline=fx.deadline()) is False
        assert dict(fx.cluster.requests) == {"get": 1}

    asyncio.run(main())


def split_log(fx: Fixture) -> SplitLog:
    return SplitLog(EventLog(fx.cluster, clock=fx.clock), fx.splits(), P)


def test_split_log_partitions_declares_the_record_log_and_counts_the_splits(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        log = split_log(fx)
        assert await log.partitions(deadline=fx.deadline()) == P + VNODE_COUNT
        layout = await EventLog(fx.cluster, clock=fx.clock).layout(deadline=fx.deadline())
        assert layout == LogLayout(P, "records")
        assert await log.partitions(deadline=fx.deadline()) == P + VNODE_COUNT  # again: same

    asyncio.run(main())


@pytest.mark.parametrize(
    ("record_at_end", "split_read", "expected"),
    [(True, True, True), (False, True, False), (True, False, False), (False, False, False)],
    ids=["both-read", "records-left", "files-left", "neither-read"],
)
def test_split_log_caught_up_needs_both_the_records_and_the_files_read(
    tmp_path: Path, record_at_end: bool, split_read: bool, expected: bool
) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        name = name_in(7, ".jsonl")
        await fx.land({name: jsonl(1)})
        log = split_log(fx)
        await log.partitions(deadline=fx.deadline())
        async with Producer(fx.cluster, partitions=P, clock=fx.clock) as producer:
            await producer.send_hashed(7, b'{"v":1}')  # key hash 7: record partition 7
        await log.poll_ends(range(P + VNODE_COUNT), deadline=fx.deadline())
        assert await log.known_end(7, deadline=fx.deadline()) == 1
        offsets = {
            7: 1 if record_at_end else 0,
            P + 7: split_offset(fx.seq(name) + 1, 0) if split_read else 0,
            P + 8: 0,  # a vnode without files
        }
        assert log.caught_up(offsets) is expected

    asyncio.run(main())


def test_split_log_reads_need_read_splits_not_int_columns(tmp_path: Path) -> None:
    async def main() -> None:
        fx = Fixture(tmp_path)
        with pytest.raises(InvalidArgument):
            await split_log(fx).read(P, 0, 10, deadline=fx.deadline())

    asyncio.run(main())


@pytest.mark.s3
def test_a_file_source_on_another_store_is_discovered_and_read_there(
    tmp_path: Path, s3_url: str
) -> None:
    """`FileSource(url=...)`: the files in an S3 bucket (moto's server), the catalog in the
    cluster's store; a CSV and a Parquet file of one vnode read as the job's events."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from laminar_cluster.connectors.sources import FileSource
    from laminar_cluster.runtime.job_node import source_store

    spec = FileSource(PREFIX, url=s3_url)
    cluster = open_store(f"file://{tmp_path}/cluster?fsync=false")
    source = source_store(spec, cluster)
    assert source is not cluster
    parquet = io.BytesIO()
    pq.write_table(pa.table({"user": ["a", "b"], "n": [1, 2]}), parquet)
    csv_name, parquet_name = name_in(9, ".csv"), name_in(9, ".parquet")
    clock = SimulatedClock()

    async def main() -> list[bytes]:
        deadline = clock.monotonic() + 30.0
        await source.put(csv_name, b"user,n\nc,3\n", CREATE)
        await source.put(parquet_name, parquet.getvalue(), CREATE)
        assert await discover(FileCatalog(cluster, clock, PREFIX), source, deadline=deadline) == 2
        catalog = FileCatalog(cluster, clock, PREFIX)
        splits = FileSplits(catalog, source, clock, file_format=None, interval_s=INTERVAL_S)
        got, offset = [], 0
        while True:
            found, offset = await splits.read(9, offset, 100, deadline=deadline)
            if found is None:
                return got
            got.extend(bytes(r) for r in found.records)

    try:
        got = asyncio.run(main())
    finally:
        asyncio.run(source.close())
    assert sorted(got) == sorted(
        [b'{"user":"c","n":"3"}', b'{"user":"a","n":1}', b'{"user":"b","n":2}']
    )
