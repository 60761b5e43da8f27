"""FileStore, the file:// backend with cross-process CAS (docs/protocols/file-store.md)."""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import stat
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest

from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    NotSupported,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import file_backend
from laminar_cluster.store.api import CREATE, OVERWRITE, IfMatch
from laminar_cluster.store.file_backend import HEADER_BYTES, FileStore
from tests.processes.workers import increment_counter


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path, fsync=False)


@run_async
async def test_fs1_create_is_exclusive(store: FileStore) -> None:
    created = await store.put("k", b"first", CREATE)
    with pytest.raises(ObjectAlreadyExists) as caught:
        await store.put("k", b"second", CREATE)
    assert caught.value.key == "k"
    got = await store.get("k")
    assert (got.body, got.meta.e_tag, got.meta.version) == (b"first", created.e_tag, None)


@run_async
async def test_fs1_racing_creates_one_wins(store: FileStore) -> None:
    creates = (store.put("race/k", b"%d" % index, CREATE) for index in range(16))
    outcomes = await asyncio.gather(*creates, return_exceptions=True)
    winners = [
        index for index, outcome in enumerate(outcomes) if not isinstance(outcome, Exception)
    ]
    assert len(winners) == 1
    assert sum(isinstance(outcome, ObjectAlreadyExists) for outcome in outcomes) == 15
    assert (await store.get("race/k")).body == b"%d" % winners[0]
    assert os.listdir(Path(store.url.removeprefix("file://")) / "tmp") == []


@run_async
async def test_fs3_if_match_happy_path_then_stale_token_rejected(store: FileStore) -> None:
    await store.put("cfg", b"v1", CREATE)
    meta = await store.head("cfg")
    result = await store.put("cfg", b"v2", meta.token)  # happy path
    got = await store.get("cfg")
    assert (got.body, got.meta.size, got.meta.e_tag) == (b"v2", 2, result.e_tag)
    assert result.e_tag != meta.e_tag and result.version is None
    with pytest.raises(PreconditionFailed) as caught:  # the token of v1 is stale now
        await store.put("cfg", b"v3", meta.token)
    assert caught.value.key == "cfg"
    unchanged = await store.get("cfg")
    assert (unchanged.body, unchanged.meta.e_tag) == (b"v2", result.e_tag)


@run_async
async def test_fs3_if_match_missing_and_version_tokens(store: FileStore) -> None:
    with pytest.raises(ObjectNotFound):
        await store.put("absent", b"x", IfMatch(e_tag="0" * 32, version=None))
    with pytest.raises(ObjectNotFound):
        await store.get("absent")
    meta_e_tag = (await store.put("k", b"x", CREATE)).e_tag
    with pytest.raises(PreconditionFailed):  # this backend has no versions
        await store.put("k", b"y", IfMatch(e_tag=None, version="1"))
    with pytest.raises(PreconditionFailed):
        await store.put("k", b"y", IfMatch(e_tag=meta_e_tag, version="1"))
    assert (await store.get("k")).body == b"x"


@run_async
async def test_fs2_e_tag_changes_on_identical_rewrite(store: FileStore) -> None:
    e_tags = [(await store.put("same", b"bytes", OVERWRITE)).e_tag]  # OVERWRITE also creates
    for _ in range(5):
        e_tags.append((await store.put("same", b"bytes", OVERWRITE)).e_tag)
    for _ in range(5):
        token = (await store.head("same")).token
        e_tags.append((await store.put("same", b"bytes", token)).e_tag)
    assert len(set(e_tags)) == len(e_tags)
    with pytest.raises(PreconditionFailed):
        await store.put("same", b"bytes", IfMatch(e_tag=e_tags[-2], version=None))
    got = await store.get("same")
    assert (got.body, got.meta.size, got.meta.e_tag) == (b"bytes", 5, e_tags[-1])


@run_async
async def test_get_with_end(store: FileStore) -> None:
    await store.put("blob", b"0123456789", CREATE)
    cut = await store.get("blob", end=4)
    assert (cut.body, cut.meta.size, cut.complete) == (b"0123", 10, False)
    assert (await store.get("blob", end=0)).body == b""
    whole = await store.get("blob", end=100)
    assert whole.body == b"0123456789" and whole.complete
    assert (await store.get("blob")).meta == cut.meta == await store.head("blob")
    with pytest.raises(InvalidArgument):
        await store.get("blob", end=-1)
    await store.put("empty", b"", CREATE)
    empty = await store.get("empty", end=5)
    assert empty.body == b"" and empty.meta.size == 0 and empty.complete


LIST_KEYS = ["a/b/c", "a/b/d/e", "a/bc", "a/bd/e", "a-b", "a0", "ab", "b", "tmp/x", "locks/y"]


async def _put_all(store: FileStore, keys: list[str]) -> None:
    for key in keys:
        await store.put(key, key.encode(), CREATE)


async def _keys(store: FileStore, prefix: str, **kwargs: Any) -> list[str]:
    return [meta.key for meta in await store.list(prefix, **kwargs)]


@run_async
async def test_fs7_list_prefix_semantics(store: FileStore) -> None:
    assert await _keys(store, "") == []  # nothing written yet, no layout yet
    await _put_all(store, LIST_KEYS)
    assert await _keys(store, "") == sorted(LIST_KEYS)
    assert await _keys(store, "a/b") == ["a/b/c", "a/b/d/e", "a/bc", "a/bd/e"]
    assert await _keys(store, "a/b/") == ["a/b/c", "a/b/d/e"]
    assert await _keys(store, "a/b/d") == ["a/b/d/e"]
    assert await _keys(store, "a") == sorted(key for key in LIST_KEYS if key.startswith("a"))
    assert await _keys(store, "a/b/c") == ["a/b/c"]
    assert await _keys(store, "a/b/c/") == []  # a/b/c is an object, not a directory
    assert await _keys(store, "zz") == await _keys(store, "nope/deeper/x") == []
    assert await _keys(store, "x" * 300) == []
    metas = await store.list("a/bc")
    assert [(m.key, m.size) for m in metas] == [("a/bc", 4)]
    assert metas[0] == await store.head("a/bc")


@run_async
async def test_fs7_list_offset_and_limit_page_through(store: FileStore) -> None:
    await _put_all(store, LIST_KEYS)
    everything = sorted(LIST_KEYS)
    paged: list[str] = []
    offset: str | None = None
    for _ in range(len(everything) + 1):
        page = await _keys(store, "", offset=offset, limit=3)
        assert len(page) <= 3
        if not page:
            break
        paged += page
        offset = page[-1]
    assert paged == everything
    after_a_b = ["a/b/c", "a/b/d/e", "a/bc", "a/bd/e", "a0", "ab"]
    assert await _keys(store, "a", offset="a/b") == after_a_b
    assert await _keys(store, "a/b", offset="a/b/c", limit=2) == ["a/b/d/e", "a/bc"]
    assert await _keys(store, "", offset="a/bd/e") == ["a0", "ab", "b", "locks/y", "tmp/x"]
    assert await _keys(store, "", limit=0) == []
    with pytest.raises(InvalidArgument):
        await store.list("", limit=-1)


@run_async
async def test_fs7_temp_and_lock_files_never_listed(store: FileStore, tmp_path: Path) -> None:
    await store.put("tmp/x", b"object", CREATE)
    result = await store.put("k", b"payload", OVERWRITE)  # makes one lock file
    (tmp_path / "tmp" / "stray.tmp").write_bytes(b"LCF1" + b"0" * 32 + b"\nhalf-written")
    assert [len(p.name) for p in (tmp_path / "locks").glob("*.lock")] == [len("NN.lock")]
    raw = (tmp_path / "objects" / "k").read_bytes()
    assert raw == b"LCF1" + str(result.e_tag).encode() + b"\n" + b"payload"
    assert len(raw) == HEADER_BYTES + len(b"payload")
    assert await _keys(store, "") == ["k", "tmp/x"]
    assert await _keys(store, "t") == ["tmp/x"]
    assert await _keys(store, "l") == []


@run_async
async def test_fs10_delete_idempotent(store: FileStore) -> None:
    await store.delete("never/was")
    await store.put("d/k", b"v", CREATE)
    await store.delete("d/k")
    with pytest.raises(ObjectNotFound):
        await store.get("d/k")
    await store.delete("d/k")
    assert await _keys(store, "") == []
    await store.put("d/k", b"again", CREATE)  # the directory left behind is reused
    assert (await store.get("d/k")).body == b"again"


@run_async
async def test_fs6_corrupt_header_raises_corrupt_record(store: FileStore, tmp_path: Path) -> None:
    await store.put("good", b"fine", CREATE)
    objects = tmp_path / "objects"
    (objects / "bad").write_bytes(b"LCF2" + b"0" * 32 + b"\nbody")
    (objects / "short").write_bytes(b"LCF1abc")
    (objects / "upper").write_bytes(b"LCF1" + b"A" * 32 + b"\n")
    for key in ("bad", "short", "upper"):
        token = IfMatch(e_tag="0" * 32, version=None)
        for call in (store.get(key), store.head(key), store.put(key, b"x", token)):
            with pytest.raises(CorruptRecord) as caught:
                await call
            assert caught.value.key == key
    with pytest.raises(CorruptRecord):
        await store.list("")
    assert (objects / "bad").read_bytes().endswith(b"\nbody")  # never rewritten
    assert (await store.get("good")).body == b"fine"


@pytest.mark.parametrize(
    "key", ["", "/a", "a/", "a//b", "a/../b", "./a", "a\\b", "a/x#12", "a\x00b", "s" * 256]
)
def test_fs11_invalid_keys_rejected(store: FileStore, tmp_path: Path, key: str) -> None:
    async def attempt_all() -> None:
        for call in (store.get(key), store.head(key), store.delete(key)):
            with pytest.raises(InvalidArgument):
                await call
        for mode in (CREATE, OVERWRITE, IfMatch(e_tag="0" * 32, version=None)):
            with pytest.raises(InvalidArgument):
                await store.put(key, b"x", mode)

    asyncio.run(attempt_all())
    assert list(tmp_path.iterdir()) == []  # rejected before any file system call


@pytest.mark.parametrize("prefix", ["/a", "a//", "a/../b", "a\\b", "a/.."])
@run_async
async def test_fs11_invalid_prefixes_rejected(store: FileStore, prefix: str) -> None:
    with pytest.raises(InvalidArgument):
        await store.list(prefix)


@run_async
async def test_object_and_prefix_directory_conflict_not_supported(store: FileStore) -> None:
    await store.put("a", b"file", CREATE)
    await store.put("c/d", b"x", CREATE)
    for key in ("a/b", "c"):  # under an object; at a directory of objects
        for mode in (CREATE, OVERWRITE):
            with pytest.raises(NotSupported):
                await store.put(key, b"x", mode)
    with pytest.raises(ObjectNotFound):
        await store.get("c")
    with pytest.raises(ObjectNotFound):
        await store.get("a/b")
    await store.delete("c")
    assert await _keys(store, "") == ["a", "c/d"]


@run_async
async def test_fs4_sixteen_tasks_cas_increments_exact(store: FileStore) -> None:
    await store.put("counter", b"0", CREATE)

    async def worker() -> list[int]:
        return [(await increment_counter(store, "counter", 10_000))[0] for _ in range(25)]

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(worker()) for _ in range(16)]
    written = sorted(value for task in tasks for value in task.result())
    assert written == list(range(1, 401))  # every value written exactly once: no lost update
    assert (await store.get("counter")).body == b"400"


@run_async
async def test_two_instances_on_one_root_see_each_others_writes(tmp_path: Path) -> None:
    first, second = FileStore(tmp_path, fsync=False), FileStore(str(tmp_path), fsync=True)
    assert first.url == second.url == f"file://{tmp_path}"
    created = await first.put("shared/k", b"from first", CREATE)
    seen = await second.get("shared/k")
    assert (seen.body, seen.meta.e_tag) == (b"from first", created.e_tag)
    updated = await second.put("shared/k", b"from second", seen.meta.token)
    with pytest.raises(PreconditionFailed):
        await first.put("shared/k", b"stale", IfMatch(e_tag=created.e_tag, version=None))
    assert (await first.get("shared/k")).meta.e_tag == updated.e_tag
    assert await _keys(first, "shared/") == ["shared/k"]
    await first.delete("shared/k")
    with pytest.raises(ObjectNotFound):
        await second.head("shared/k")


@run_async
async def test_fs5_reads_see_one_whole_version_during_overwrites(store: FileStore) -> None:
    bodies = {(await store.put("hot", b"start", CREATE)).e_tag: b"start"}
    seen: list[tuple[str | None, bytes]] = []

    async def writer() -> None:
        for index in range(200):
            body = b"%d:" % index + b"x" * (index * 37 % 5000)
            bodies[(await store.put("hot", body, OVERWRITE)).e_tag] = body

    async def reader() -> None:
        for _ in range(200):
            got = await store.get("hot")
            assert got.complete
            seen.append((got.meta.e_tag, got.body))

    async with asyncio.TaskGroup() as group:
        for job in (writer(), reader(), reader()):
            group.create_task(job)
    assert all(bodies[e_tag] == body for e_tag, body in seen)


@run_async
async def test_fs8_failure_before_replace_is_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, fsync=True)
    await store.put("k", b"v1", CREATE)
    monkeypatch.setattr(file_backend.os, "fsync", Mock(side_effect=OSError(errno.EIO, "I/O error")))
    for mode in (CREATE, OVERWRITE, (await store.head("k")).token):
        with pytest.raises(StoreUnavailable):
            await store.put("k", b"v2", mode)
    monkeypatch.undo()
    assert (await store.get("k")).body == b"v1"
    assert list((tmp_path / "tmp").iterdir()) == []  # temp files cleaned up


@run_async
async def test_fs8_failure_at_final_step_is_write_outcome_unknown(
    store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put("k", b"v1", CREATE)
    monkeypatch.setattr(
        file_backend.os, "replace", Mock(side_effect=OSError(errno.EIO, "I/O error"))
    )
    monkeypatch.setattr(file_backend.os, "link", Mock(side_effect=OSError(errno.EIO, "I/O error")))
    monkeypatch.setattr(
        file_backend.os, "unlink", Mock(side_effect=OSError(errno.EIO, "I/O error"))
    )
    for key, mode in (("k", OVERWRITE), ("k", (await store.head("k")).token), ("new", CREATE)):
        with pytest.raises(WriteOutcomeUnknown) as caught:
            await store.put(key, b"v2", mode)
        assert caught.value.key == key
    with pytest.raises(WriteOutcomeUnknown):
        await store.delete("k")
    monkeypatch.undo()
    assert (await store.get("k")).body == b"v1"


@run_async
async def test_fs9_fsync_before_rename_and_directories_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, fsync=True)
    await store.put("warm-up", b"", CREATE)  # the layout is made and synced once
    events: list[str] = []

    def recording(name: str, real: Callable[..., None]) -> Callable[..., None]:
        def call(*args: Any) -> None:
            if name == "fsync":
                events.append("fsync-dir" if stat.S_ISDIR(os.fstat(args[0]).st_mode) else "fsync")
            else:
                events.append(name)
            real(*args)

        return call

    for name in ("fsync", "replace", "link"):
        monkeypatch.setattr(file_backend.os, name, recording(name, getattr(os, name)))
    await store.put("x/y/z", b"new", CREATE)  # new directories x/ and x/y/ are synced too
    assert events == ["fsync", "link", "fsync-dir", "fsync-dir", "fsync-dir"]
    events.clear()
    await store.put("x/y/z", b"newer", OVERWRITE)
    assert events == ["fsync", "replace", "fsync-dir"]
    events.clear()
    await store.delete("x/y/z")
    assert events == ["fsync-dir"]


@run_async
async def test_sweep_removes_only_old_temp_files(store: FileStore, tmp_path: Path) -> None:
    await store.put("k", b"v", CREATE)
    old, fresh = tmp_path / "tmp" / "old.tmp", tmp_path / "tmp" / "fresh.tmp"
    old.write_bytes(b"crashed writer")
    fresh.write_bytes(b"write in flight")
    hour_ago_ns = old.stat().st_mtime_ns - 3600 * 1_000_000_000
    os.utime(old, ns=(hour_ago_ns, hour_ago_ns))
    assert await store.sweep_temp_files(older_than_s=60) == 1
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == ["fresh.tmp"]
    assert (await store.get("k")).body == b"v"
    with pytest.raises(InvalidArgument):
        await store.sweep_temp_files(older_than_s=-1)
