"""One contract suite, run unchanged against memory://, file:// and the S3 test server."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import (
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
)
from laminar_cluster.store import (
    CREATE,
    OVERWRITE,
    IfMatch,
    ObjectStore,
    ReadBack,
    put_resolved,
)
from laminar_cluster.store.probe import CHECKS, probe_store_contract


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def test_sc1_create_is_exclusive(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("a/one", b"first", CREATE)
        with pytest.raises((ObjectAlreadyExists, PreconditionFailed)):
            await store.put("a/one", b"second", CREATE)
        assert (await store.get("a/one")).body == b"first"

    run(body())


def test_sc1_racing_creates_have_exactly_one_winner(make_store: Callable[[], ObjectStore]) -> None:
    async def body() -> None:
        clients = [make_store() for _ in range(8)]

        async def attempt(index: int, client: ObjectStore) -> int | None:
            try:
                await client.put("race/key", f"writer-{index}".encode(), CREATE)
            except (ObjectAlreadyExists, PreconditionFailed):
                return None
            return index

        results = await asyncio.gather(*(attempt(i, c) for i, c in enumerate(clients)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert (await clients[0].get("race/key")).body == f"writer-{winners[0]}".encode()

    run(body())


def test_sc3_get_returns_body_and_metadata(store: ObjectStore) -> None:
    async def body() -> None:
        written = await store.put("m/obj", b"hello world", CREATE)
        got = await store.get("m/obj")
        assert got.body == b"hello world"
        assert got.complete
        assert got.meta.key == "m/obj"
        assert got.meta.size == 11
        assert got.meta.e_tag is not None or got.meta.version is not None
        assert (got.meta.e_tag, got.meta.version) == (written.e_tag, written.version)
        head = await store.head("m/obj")
        assert (head.size, head.e_tag, head.version) == (11, got.meta.e_tag, got.meta.version)

    run(body())


def test_get_with_end_reads_a_prefix_and_reports_full_size(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("r/obj", b"0123456789", CREATE)
        cut = await store.get("r/obj", end=4)
        assert cut.body == b"0123" and cut.meta.size == 10 and not cut.complete
        whole = await store.get("r/obj", end=100)
        assert whole.body == b"0123456789" and whole.complete
        await store.put("r/empty", b"", CREATE)
        empty = await store.get("r/empty", end=1)
        assert empty.body == b"" and empty.meta.size == 0 and empty.complete

    run(body())


def test_sc3_update_if_match_replaces_and_changes_the_version(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("u/obj", b"v1", CREATE)
        v1 = (await store.get("u/obj")).meta
        result = await store.put("u/obj", b"v2", v1.token)
        v2 = (await store.get("u/obj")).meta
        assert (await store.get("u/obj")).body == b"v2"
        assert (v2.e_tag, v2.version) != (v1.e_tag, v1.version)
        assert (result.e_tag, result.version) == (v2.e_tag, v2.version)

    run(body())


def test_sc2_stale_update_is_rejected_and_changes_nothing(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("s/obj", b"v1", CREATE)
        v1 = (await store.get("s/obj")).meta
        await store.put("s/obj", b"v2", v1.token)
        v2 = (await store.get("s/obj")).meta
        with pytest.raises(PreconditionFailed):
            await store.put("s/obj", b"stale", v1.token)
        after = await store.get("s/obj")
        assert after.body == b"v2"
        assert (after.meta.e_tag, after.meta.version) == (v2.e_tag, v2.version)

    run(body())


def test_update_of_a_missing_object_fails(store: ObjectStore) -> None:
    async def body() -> None:
        with pytest.raises((ObjectNotFound, PreconditionFailed)):
            await store.put("missing/obj", b"x", IfMatch(e_tag='"nope"', version=None))
        with pytest.raises(ObjectNotFound):
            await store.get("missing/obj")

    run(body())


def test_overwrite_replaces_unconditionally(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("o/obj", b"one", OVERWRITE)
        await store.put("o/obj", b"two", OVERWRITE)
        assert (await store.get("o/obj")).body == b"two"

    run(body())


def test_missing_object_raises_not_found(store: ObjectStore) -> None:
    async def body() -> None:
        with pytest.raises(ObjectNotFound):
            await store.get("nothing/here")
        with pytest.raises(ObjectNotFound):
            await store.head("nothing/here")

    run(body())


def test_sc5_list_is_a_sorted_string_prefix_listing(store: ObjectStore) -> None:
    async def body() -> None:
        keys = ["l/b", "l/a/2", "l/a/1", "l/ab", "l/abc/x", "m/z", "l/a#x"]
        for key in keys:
            await store.put(key, key.encode(), CREATE)
        assert [m.key for m in await store.list("l/")] == sorted(k for k in keys if k[0] == "l")
        assert [m.key for m in await store.list("l/a")] == [
            "l/a#x",
            "l/a/1",
            "l/a/2",
            "l/ab",
            "l/abc/x",
        ]
        assert [m.key for m in await store.list("l/a/")] == ["l/a/1", "l/a/2"]
        assert [m.key for m in await store.list("l/ab")] == ["l/ab", "l/abc/x"]
        assert [m.key for m in await store.list("nope/")] == []
        everything = [m.key for m in await store.list("")]
        assert everything == sorted(keys)
        sizes = {m.key: m.size for m in await store.list("l/")}
        assert sizes["l/abc/x"] == len(b"l/abc/x")

    run(body())


def test_sc5_list_pages_with_offset_and_limit(store: ObjectStore) -> None:
    async def body() -> None:
        keys = [f"p/{i:03d}" for i in range(25)]
        for key in keys:
            await store.put(key, b"x", CREATE)
        pages: list[list[str]] = []
        offset: str | None = None
        while True:
            page = [m.key for m in await store.list("p/", offset=offset, limit=10)]
            if not page:
                break
            pages.append(page)
            offset = page[-1]
        assert [len(page) for page in pages] == [10, 10, 5]
        assert [key for page in pages for key in page] == keys

    run(body())


def test_sc4_delete_is_visible_and_idempotent(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("d/obj", b"x", CREATE)
        await store.delete("d/obj")
        with pytest.raises(ObjectNotFound):
            await store.get("d/obj")
        assert [m.key for m in await store.list("d/")] == []
        await store.delete("d/obj")  # deleting a missing object is not an error
        await store.put("d/obj", b"again", CREATE)  # and the key can be created anew
        assert (await store.get("d/obj")).body == b"again"

    run(body())


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "a/./b", "trail/", "x/tmp#12"])
def test_sc9_every_backend_rejects_invalid_keys(store: ObjectStore, key: str) -> None:
    async def body() -> None:
        with pytest.raises(InvalidArgument):
            await store.put(key, b"x", CREATE)
        with pytest.raises(InvalidArgument):
            await store.get(key)

    run(body())


# Requests no store can serve, each a call on a store; every backend refuses every one of them
# with InvalidArgument, before any I/O (store/api.py `check_*`).
BAD_REQUESTS: dict[str, Callable[[ObjectStore], Awaitable[object]]] = {
    "get with a negative end": lambda s: s.get("k/obj", end=-1),
    "get with a str end": lambda s: s.get("k/obj", end="3"),  # type: ignore[arg-type]
    "get with a bool end": lambda s: s.get("k/obj", end=True),
    "get of a non-str key": lambda s: s.get(7),  # type: ignore[arg-type]
    "get of a bad key": lambda s: s.get("k//obj"),
    "head of a non-str key": lambda s: s.head(b"k/obj"),  # type: ignore[arg-type]
    "head of a bad key": lambda s: s.head("/k/obj"),
    "put of a str body": lambda s: s.put("k/obj", "text", CREATE),  # type: ignore[arg-type]
    "put of an int body": lambda s: s.put("k/obj", 5, OVERWRITE),  # type: ignore[arg-type]
    "put of no body": lambda s: s.put("k/obj", None, CREATE),  # type: ignore[arg-type]
    "put with a str mode": lambda s: s.put("k/obj", b"x", "create"),  # type: ignore[arg-type]
    "put with no mode": lambda s: s.put("k/obj", b"x", None),  # type: ignore[arg-type]
    "put of a non-str key": lambda s: s.put(None, b"x", CREATE),  # type: ignore[arg-type]
    "put of a bad key": lambda s: s.put("k/obj/", b"x", CREATE),
    "list with a negative limit": lambda s: s.list("k/", limit=-1),
    "list with a str limit": lambda s: s.list("k/", limit="2"),  # type: ignore[arg-type]
    "list with an int offset": lambda s: s.list("k/", offset=3),  # type: ignore[arg-type]
    "list of a non-str prefix": lambda s: s.list(None),  # type: ignore[arg-type]
    "list of a bad prefix": lambda s: s.list("k/../"),
    "delete of a non-str key": lambda s: s.delete(1.5),  # type: ignore[arg-type]
    "delete of a bad key": lambda s: s.delete("k/./obj"),
}


@pytest.mark.parametrize("request_name", sorted(BAD_REQUESTS))
def test_every_backend_refuses_a_bad_request_with_invalid_argument(
    store: ObjectStore, request_name: str
) -> None:
    async def body() -> None:
        await store.put("k/obj", b"kept", CREATE)
        with pytest.raises(InvalidArgument):
            await BAD_REQUESTS[request_name](store)
        assert (await store.get("k/obj")).body == b"kept"  # nothing written
        assert [meta.key for meta in await store.list("")] == ["k/obj"]

    run(body())


def test_an_if_match_naming_nothing_is_invalid() -> None:
    with pytest.raises(InvalidArgument):
        IfMatch(e_tag=None, version=None)
    with pytest.raises(InvalidArgument):
        IfMatch(e_tag=7, version=None)  # type: ignore[arg-type]


def test_a_zero_limit_lists_nothing_on_every_backend(store: ObjectStore) -> None:
    async def body() -> None:
        await store.put("z/obj", b"x", CREATE)
        assert await store.list("z/", limit=0) == []

    run(body())


def test_store_passes_the_contract_probe(store: ObjectStore) -> None:
    report = run(probe_store_contract(store, RealClock(), timeout_s=30))
    assert [r.name for r in report.results] == list(CHECKS)  # type: ignore[attr-defined]
    assert report.ok, report.failures()  # type: ignore[attr-defined]


def test_sc7_put_resolved_acknowledged_write_is_ours(store: ObjectStore) -> None:
    async def body() -> None:
        resolution = await put_resolved(store, "rb/obj", b"mine", CREATE)
        assert resolution.state is ReadBack.OURS and resolution.put_result is not None
        lost = await put_resolved(store, "rb/obj", b"someone else", CREATE)
        assert lost.state is ReadBack.FOREIGN
        assert lost.current is not None and lost.current.body == b"mine"

    run(body())


def test_sc6_concurrent_cas_increments_are_exact(make_store: Callable[[], ObjectStore]) -> None:
    """8 clients x 10 read-modify-write increments with nonce bodies end at exactly 80."""

    async def body() -> None:
        setup = make_store()
        await setup.put("cas/counter", _counter_body(0), CREATE)

        async def worker(client: ObjectStore) -> int:
            done = 0
            for _ in range(2_000):
                if done == 10:
                    return done
                current = await client.get("cas/counter")
                value = json.loads(current.body)["value"]
                try:
                    await client.put("cas/counter", _counter_body(value + 1), current.meta.token)
                except PreconditionFailed:
                    continue
                done += 1
            raise AssertionError("worker did not finish its increments in 2,000 attempts")

        done = await asyncio.gather(*(worker(make_store()) for _ in range(8)))
        assert sum(done) == 80
        assert json.loads((await setup.get("cas/counter")).body)["value"] == 80

    run(body())


def _counter_body(value: int) -> bytes:
    # A nonce makes every body unique: S3 e_tags are content hashes (ABA otherwise).
    return json.dumps({"value": value, "nonce": uuid.uuid4().hex}).encode()
