"""The catalog of a file source (connectors/file_catalog.py) on the real file:// store: the
chain of pages, concurrent appends, strict page checks, discovery by listing, and the requests
a refresh and a discovery cost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.clock import RealClock
from laminar_cluster.codec import encode
from laminar_cluster.connectors import file_catalog
from laminar_cluster.connectors.file_catalog import (
    CatalogFile,
    CatalogPage,
    FileCatalog,
    discover,
    page_path,
    vnode_of_file,
)
from laminar_cluster.errors import CorruptRecord, LaminarError
from laminar_cluster.store import CREATE, ObjectMeta, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.faulty import FaultConfig, FaultyStore
from laminar_cluster.store.forwarding import ForwardingStore

PREFIX = "in/clicks/"


def far() -> float:
    return RealClock().monotonic() + 30.0


def file_store(tmp_path: Path, name: str = "store") -> ObjectStore:
    return open_store(f"file://{tmp_path}/{name}?fsync=false")


def catalog_of(store: ObjectStore) -> FileCatalog:
    return FileCatalog(store, RealClock(), PREFIX)


def files(*names: str, size: int = 10) -> list[CatalogFile]:
    return [CatalogFile(name=f"{PREFIX}{name}", size=size, e_tag=None) for name in names]


def names_in_vnode(vnode: int, count: int) -> list[str]:
    """`count` file names (without the prefix) whose full names fall in `vnode`."""
    found: list[str] = []
    for i in range(100_000):
        if vnode_of_file(f"{PREFIX}f{i:05d}.jsonl") == vnode:
            found.append(f"f{i:05d}.jsonl")
            if len(found) == count:
                return found
    raise AssertionError(f"fewer than {count} names in vnode {vnode}")


def test_refresh_learns_the_pages_another_catalog_appended(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer, reader = catalog_of(store), catalog_of(store)
        assert await reader.refresh(deadline=far()) is False
        assert await writer.append(files("b.jsonl", "a.jsonl"), deadline=far()) == 2
        assert await writer.append(files("c.jsonl"), deadline=far()) == 1
        assert await reader.refresh(deadline=far()) is True
        assert [f.name for f in reader.files] == [
            f"{PREFIX}a.jsonl",
            f"{PREFIX}b.jsonl",
            f"{PREFIX}c.jsonl",
        ]
        assert await reader.refresh(deadline=far()) is False

    asyncio.run(main())


def test_fs1_a_files_seq_never_changes_as_pages_are_appended(tmp_path: Path) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        writer = catalog_of(store)
        await writer.append(files("m.jsonl", "z.jsonl"), deadline=far())
        first = list(writer.files)
        await writer.append(files("a.jsonl", "m.jsonl", "b.jsonl"), deadline=far())
        assert writer.files[:2] == first  # a name sorting earlier is appended, not inserted
        assert [f.name for f in writer.files[2:]] == [f"{PREFIX}a.jsonl", f"{PREFIX}b.jsonl"]
        reader = catalog_of(store)
        await reader.refresh(deadline=far())
        assert reader.files == writer.files

    asyncio.run(main())


def test_fs1_an_append_of_only_known_files_writes_no_page(tmp_path: Path) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        catalog = catalog_of(store)
        await catalog.append(files("a.jsonl"), deadline=far())
        store.reset()
        assert await catalog.append(files("a.jsonl"), deadline=far()) == 0
        assert store.requests["put"] == 0
        assert not await store.inner.list(page_path(1))

    asyncio.run(main())


def test_next_file_and_pending_count_only_the_vnodes_own_files(tmp_path: Path) -> None:
    async def main() -> None:
        mine = names_in_vnode(7, 3)
        other = names_in_vnode(8, 2)
        catalog = catalog_of(open_store("memory://"))
        await catalog.append(files(mine[0], other[0]), deadline=far())
        await catalog.append(files(mine[1], other[1], mine[2]), deadline=far())
        seqs = [i for i, f in enumerate(catalog.files) if vnode_of_file(f.name) == 7]
        assert len(seqs) == 3
        assert catalog.next_file(7, 0) == seqs[0]
        assert catalog.next_file(7, seqs[0] + 1) == seqs[1]
        assert catalog.next_file(7, seqs[2]) == seqs[2]
        assert catalog.next_file(7, seqs[2] + 1) is None
        assert catalog.pending(7, 0) == 3
        assert catalog.pending(7, seqs[1]) == 2
        assert catalog.pending(7, seqs[2] + 1) == 0
        assert catalog.pending(8, 0) == 2
        assert catalog.next_file(9, 0) is None and catalog.pending(9, 0) == 0

    asyncio.run(main())


def test_vnode_of_file_is_within_the_vnodes_and_spreads_names() -> None:
    vnodes = {vnode_of_file(f"{PREFIX}f{i}.txt") for i in range(2_000)}
    assert all(0 <= v < VNODE_COUNT for v in vnodes)
    assert len(vnodes) > VNODE_COUNT // 2


def test_fs1_two_catalogs_appending_overlapping_files_at_once_catalogue_each_once(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        one, two = catalog_of(store), catalog_of(store)
        left = files(*(f"f{i:03d}.jsonl" for i in range(0, 60)))
        right = files(*(f"f{i:03d}.jsonl" for i in range(30, 90)))
        for _ in range(3):  # several rounds, so that creates race more than once
            await asyncio.gather(
                one.append(left[:20], deadline=far()), two.append(right[:20], deadline=far())
            )
            left, right = left[20:], right[20:]
        reader = catalog_of(store)
        await reader.refresh(deadline=far())
        names = [f.name for f in reader.files]
        assert sorted(names) == [f"{PREFIX}f{i:03d}.jsonl" for i in range(90)]
        assert len(set(names)) == len(names)
        await one.refresh(deadline=far())
        await two.refresh(deadline=far())
        assert one.files == two.files == reader.files

    asyncio.run(main())


def test_fs1_catalogs_racing_over_faulty_clients_catalogue_each_file_once(
    tmp_path: Path,
) -> None:
    """Three discoverers appending overlapping files at once, each over its own client that
    fails requests before and after they apply, reports applied creates as conflicts and
    delays every request: the chain holds every file once, and all agree on the seqs."""
    config = FaultConfig(
        error_before_rate=0.1,
        error_after_rate=0.1,
        conflict_after_rate=0.1,
        latency_s_min=0.0005,
        latency_s_max=0.003,
    )

    async def main() -> int:
        store = file_store(tmp_path)
        clock = RealClock()
        faulty = [FaultyStore(store, clock=clock, seed=s, config=config) for s in (1, 2, 3)]
        catalogs = [FileCatalog(client, clock, PREFIX) for client in faulty]
        batches = [
            files(*(f"f{i:03d}.jsonl" for i in range(k * 20, k * 20 + 50))) for k in (0, 1, 2)
        ]

        async def append_all(catalog: FileCatalog, found: list[CatalogFile]) -> None:
            for _ in range(200):  # a failed append is tried again, as discovery does
                try:
                    for start in range(0, len(found), 10):
                        await catalog.append(found[start : start + 10], deadline=far())
                    return
                except LaminarError:
                    await asyncio.sleep(0)
            raise AssertionError("an append did not finish in 200 attempts")

        await asyncio.gather(*(append_all(c, b) for c, b in zip(catalogs, batches, strict=True)))
        reader = catalog_of(store)
        await reader.refresh(deadline=far())
        names = [f.name for f in reader.files]
        assert sorted(names) == [f"{PREFIX}f{i:03d}.jsonl" for i in range(90)]
        for catalog in catalogs:
            await catalog.refresh(deadline=far())
            assert catalog.files == reader.files
        return sum(sum(client.stats.injected.values()) for client in faulty)

    assert asyncio.run(main()) > 0  # faults were injected


async def put_page(
    store: ObjectStore, at: int, page: int, first_seq: int, names: list[str]
) -> None:
    """Write, at page `at`'s key, a page saying it is `page` from `first_seq` (checked by no
    writer: the bytes of a faulty or foreign one)."""
    body = encode(
        CatalogPage(
            version=1,
            page=page,
            first_seq=first_seq,
            files=tuple(CatalogFile(name=name, size=1, e_tag=None) for name in names),
        )
    )
    await store.put(page_path(at), body, CREATE)


@pytest.mark.parametrize(
    ("page", "first_seq", "names"),
    [
        pytest.param(2, 2, [f"{PREFIX}c"], id="wrong-page-number"),
        pytest.param(1, 1, [f"{PREFIX}c"], id="wrong-first-seq"),
        pytest.param(1, 2, [f"{PREFIX}c"] * 2, id="duplicate-in-page"),
        pytest.param(1, 2, [f"{PREFIX}a"], id="duplicate-of-earlier-page"),
        pytest.param(1, 2, ["in/other/c"], id="outside-prefix"),
        pytest.param(1, 2, [f"{PREFIX}c", "in/other/d"], id="outside-prefix-after-a-good-name"),
        pytest.param(1, 2, [], id="empty-page"),
    ],
)
def test_a_page_that_breaks_the_chain_is_corrupt_and_learns_nothing(
    tmp_path: Path, page: int, first_seq: int, names: list[str]
) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        await put_page(store, 0, 0, 0, [f"{PREFIX}a", f"{PREFIX}b"])
        await put_page(store, 1, page, first_seq, names)
        catalog = catalog_of(store)
        with pytest.raises(CorruptRecord):
            await catalog.refresh(deadline=far())
        # Page 0 is learned; nothing of the corrupt page 1 is trusted.
        assert [f.name for f in catalog.files] == [f"{PREFIX}a", f"{PREFIX}b"]
        assert catalog.next_file(vnode_of_file("in/other/c"), 2) is None
        assert catalog.next_file(vnode_of_file(f"{PREFIX}c"), 2) is None
        with pytest.raises(CorruptRecord):  # and it stays corrupt when read again
            await catalog.refresh(deadline=far())

    asyncio.run(main())


@pytest.mark.parametrize(
    "body",
    [b"\x00\xffgarbage", b"", b'{"version":1}', b"[]"],
    ids=["garbage", "empty", "missing-fields", "not-an-object"],
)
def test_a_page_of_foreign_bytes_is_corrupt(tmp_path: Path, body: bytes) -> None:
    async def main() -> None:
        store = file_store(tmp_path)
        await store.put(page_path(0), body, CREATE)
        with pytest.raises(CorruptRecord):
            await catalog_of(store).refresh(deadline=far())

    asyncio.run(main())


def test_a_refresh_when_nothing_is_new_costs_one_get(tmp_path: Path) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        await catalog_of(store).append(files("a.jsonl", "b.jsonl"), deadline=far())
        await catalog_of(store).append(files("c.jsonl"), deadline=far())
        reader = catalog_of(store)
        store.reset()
        assert await reader.refresh(deadline=far()) is True
        assert dict(store.requests) == {"get": 3}  # two pages and the absent third
        store.reset()
        assert await reader.refresh(deadline=far()) is False
        assert dict(store.requests) == {"get": 1}

    asyncio.run(main())


def test_a_start_on_a_long_catalog_reads_each_page_once_a_window_at_a_time(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        store = CountingStore(file_store(tmp_path))
        writer = catalog_of(store)
        for number in range(20):
            await writer.append(files(f"{number:03d}.jsonl"), deadline=far())
        reader = catalog_of(store)
        store.reset()
        assert await reader.refresh(deadline=far()) is True
        assert [f.name for f in reader.files] == [f"{PREFIX}{n:03d}.jsonl" for n in range(20)]
        # windows of 1, 2, 4, 8 and 8 pages: the 20 pages and 3 absent ones read in 5 rounds
        assert dict(store.requests) == {"get": 23}

    asyncio.run(main())


async def put_files(store: ObjectStore, *keys: str) -> None:
    for key in keys:
        await store.put(key, f"{key}\n".encode(), CREATE)


def test_discover_catalogues_only_new_files_under_the_prefix(tmp_path: Path) -> None:
    async def main() -> None:
        cluster, source = file_store(tmp_path), file_store(tmp_path, "source")
        await put_files(source, f"{PREFIX}a.txt", f"{PREFIX}sub/b.txt", "in/clicksX/c.txt")
        catalog = catalog_of(cluster)
        assert await discover(catalog, source, deadline=far()) == 2
        found = {f.name: f for f in catalog.files}
        assert set(found) == {f"{PREFIX}a.txt", f"{PREFIX}sub/b.txt"}
        assert found[f"{PREFIX}a.txt"].size == len(f"{PREFIX}a.txt\n")
        await put_files(source, f"{PREFIX}0.txt")
        assert await discover(catalog, source, deadline=far()) == 1
        assert catalog.files[-1].name == f"{PREFIX}0.txt"
        assert await discover(catalog, source, deadline=far()) == 0
        assert len(catalog.files) == 3
        fresh = catalog_of(cluster)  # a new leader's catalog learns the pages first
        assert await discover(fresh, source, deadline=far()) == 0
        assert fresh.files == catalog.files

    asyncio.run(main())


class FolderMarkers(ForwardingStore):
    """Lists a folder marker (a key ending in '/', as S3 consoles create) before each key."""

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        listed = await self.inner.list(prefix, offset=offset, limit=limit)
        marked: list[ObjectMeta] = []
        for meta in listed:
            marker = meta.key.rsplit("/", 1)[0] + "/"
            marked.append(ObjectMeta(marker, 0, None, None, 0))
            marked.append(meta)
        return marked


def test_discover_skips_keys_ending_in_a_slash(tmp_path: Path) -> None:
    async def main() -> None:
        source = file_store(tmp_path, "source")
        await put_files(source, f"{PREFIX}a.txt", f"{PREFIX}d/b.txt")
        catalog = catalog_of(file_store(tmp_path))
        assert await discover(catalog, FolderMarkers(source), deadline=far()) == 2
        assert sorted(f.name for f in catalog.files) == [f"{PREFIX}a.txt", f"{PREFIX}d/b.txt"]

    asyncio.run(main())


def test_discover_pages_through_a_listing_longer_than_one_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_catalog, "LIST_PAGE_MAX", 4)

    async def main() -> None:
        source = CountingStore(file_store(tmp_path, "source"))
        keys = [f"{PREFIX}f{i:02d}.txt" for i in range(10)]
        await put_files(source, *keys)
        catalog = catalog_of(file_store(tmp_path))
        source.reset()
        assert await discover(catalog, source, deadline=far()) == 10
        assert sorted(f.name for f in catalog.files) == keys
        assert source.requests["list"] == 3  # 4 + 4 + 2
        await put_files(source, f"{PREFIX}f10.txt", f"{PREFIX}f11.txt")
        source.reset()
        assert await discover(catalog, source, deadline=far()) == 2
        assert source.requests["list"] == 4  # 4 + 4 + 4 + an empty page

    asyncio.run(main())


def test_discover_with_nothing_new_lists_once_and_writes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = CountingStore(file_store(tmp_path))
        source = CountingStore(file_store(tmp_path, "source"))
        await put_files(source, f"{PREFIX}a.txt", f"{PREFIX}b.txt")
        catalog = catalog_of(cluster)
        await discover(catalog, source, deadline=far())
        cluster.reset()
        source.reset()
        assert await discover(catalog, source, deadline=far()) == 0
        assert dict(source.requests) == {"list": 1}
        # The catalog knew every listed file: no page is read, none written.
        assert dict(cluster.requests) == {}

    asyncio.run(main())


def test_discover_by_a_stale_catalog_with_nothing_new_reads_the_pages_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        cluster = CountingStore(file_store(tmp_path))
        source = CountingStore(file_store(tmp_path, "source"))
        await put_files(source, f"{PREFIX}a.txt", f"{PREFIX}b.txt")
        await discover(catalog_of(cluster), source, deadline=far())  # the former leader
        stale = catalog_of(cluster)
        cluster.reset()
        source.reset()
        assert await discover(stale, source, deadline=far()) == 0
        assert dict(source.requests) == {"list": 1}
        assert dict(cluster.requests) == {"get": 3}  # page 0, then pages 1 and 2 at once (absent)

    asyncio.run(main())
