"""The process-local record cache (`store.record_cache`): verified immutable records in a
bounded LRU, watched objects read conditionally, and a wrapper that forgets what it writes."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.errors import CorruptRecord
from laminar_cluster.store import CREATE, OVERWRITE, GetResult, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.record_cache import (
    RecordCache,
    RecordCachingStore,
    caching,
    read_watched,
    record_cache,
)


def test_lru_is_bounded_by_entries_and_bytes() -> None:
    cache = RecordCache(entries_max=3, bytes_max=100)
    for index in range(4):
        cache.remember(f"k{index}", index, 10)
    assert len(cache) == 3 and cache.cached("k0", int) is None  # the oldest went first
    assert cache.cached("k1", int) == 1  # a hit makes k1 the most recent ...
    cache.remember("k4", 4, 10)
    assert cache.cached("k2", int) is None and cache.cached("k1", int) == 1  # ... so k2 went
    cache.remember("big", "x", 90)  # 90 + 3 x 10 > 100: the least recent go until it fits
    assert cache.size_bytes <= 100 and cache.cached("big", str) == "x"
    cache.remember("huge", "y", 101)  # larger than the whole bound: never kept
    assert cache.cached("huge", str) is None
    assert cache.cached("big", int) is None  # another type is a miss, never a wrong value


def test_read_through_remembers_only_what_was_found() -> None:
    async def main() -> None:
        cache = RecordCache()
        loads: list[str] = []

        async def found() -> tuple[str, int]:
            loads.append("found")
            return "record", 6

        async def absent() -> None:
            loads.append("absent")

        async def corrupt() -> tuple[str, int]:
            loads.append("corrupt")
            raise CorruptRecord("k: bad bytes", key="k")

        assert await cache.read_through("a", str, absent) is None
        assert await cache.read_through("a", str, absent) is None  # absence is not remembered
        with pytest.raises(CorruptRecord):
            await cache.read_through("k", str, corrupt)
        with pytest.raises(CorruptRecord):  # a read that did not verify is never cached
            await cache.read_through("k", str, corrupt)
        assert await cache.read_through("k", str, found) == "record"
        assert await cache.read_through("k", str, found) == "record"
        assert loads == ["absent", "absent", "corrupt", "corrupt", "found"]

    asyncio.run(main())


def test_watched_object_is_read_conditionally() -> None:
    async def main() -> None:
        counted = CountingStore(open_store("memory://"))
        store = caching(counted)
        decoded: list[bytes] = []

        def decode(got: GetResult) -> bytes:
            if got.body == b"bad":
                raise CorruptRecord("p: bad pointer", key="p")
            decoded.append(got.body)
            return got.body

        async def read() -> bytes | None:
            found = await read_watched(store, "p", decode, bytes, max_bytes=16)
            return None if found is None else found[0]

        assert await read() is None  # absent
        await counted.put("p", b"one", CREATE)
        assert await read() == b"one" and await read() == b"one"
        assert decoded == [b"one"]  # the second read was answered "unchanged"
        await counted.put("p", b"two", OVERWRITE)
        assert await read() == b"two" and decoded == [b"one", b"two"]
        await counted.put("p", b"bad", OVERWRITE)
        for _ in range(2):  # a version that does not decode is never remembered
            with pytest.raises(CorruptRecord):
                await read()
        await counted.delete("p")
        assert await read() is None
        assert counted.requests["get"] == 7  # one request per read, conditional or not

    asyncio.run(main())


def test_writes_and_deletes_through_the_wrapper_forget_the_key() -> None:
    async def main() -> None:
        store = RecordCachingStore(open_store("memory://"))
        assert caching(store) is store and record_cache(store) is store.records
        assert record_cache(store.inner) is None  # a plain store caches nothing
        store.records.remember("r", "value", 5)
        store.records.watch("w", '"e"', "pointer")
        await store.put("r", b"x", CREATE)
        await store.delete_many(["w"])
        assert store.records.cached("r", str) is None and store.records.watched("w") is None
        store.records.remember("r", "value", 5)
        await store.delete("r")
        assert store.records.cached("r", str) is None

    asyncio.run(main())
