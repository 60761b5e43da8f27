"""What one process remembers of one store's objects, so a steady loop re-reads nothing it
already knows (DESIGN.md "Cheap polling"; issue 15 "Store economy").

A `RecordCachingStore` is a pass-through wrapper that carries a `RecordCache`. The facades a
process builds once (the leader authority, the decision store, the assignment snapshot store)
each wrap the store they are given, so each has its memory, living as long as the facade; the
readers below them find it with `record_cache(store)` and cache nothing for a plain store (a
one-shot view, a test reading the store directly). Two kinds of memory:

* **Verified immutable records** (`cached` / `remember`): objects that never change once
  written: create-only records named by a sequence or a version (leader authority records,
  committed assignment snapshots) and content-addressed objects (recovery capsules, blobs).
  A reader remembers a record only after it decoded, validated and matched its address, so a
  read that did not verify is never cached and the next read tries the store again. A hit is
  as good as a fresh read of the same immutable object: the object cannot have changed, only
  been deleted, and a reader that needs to know an object is gone reads the store (or the
  deleter called `forget`). Least recently used entries go first, beyond
  `RECORD_CACHE_ENTRIES_MAX` entries or `RECORD_CACHE_BYTES_MAX` bytes of the records' stored
  encodings (the decoded objects take a small multiple of that).
* **Watched mutable objects** (`read_watched`): the last version read of a small object that
  changes now and then (a head pointer), with its e_tag. The next read is a conditional GET
  (`ObjectStore.get_if_changed`): one request, billed as a GET, that returns no body while the
  object is unchanged, and the remembered value stands for it. The value is remembered only
  after it decoded and validated, with the e_tag it was read at, so a 304 answer always pairs
  with the value of that exact version. At most `WATCHED_OBJECTS_MAX` objects per store. A
  plain store is read with a plain GET every time.

A conditional read returns the whole object when it changed (the store interface takes no
range for it), so only small objects are watched; their size is still checked after reading.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from laminar_cluster.errors import ObjectNotFound
from laminar_cluster.store.api import GetResult, ObjectStore, PutMode, PutResult
from laminar_cluster.store.forwarding import ForwardingStore

T = TypeVar("T")

# The bound of the immutable-record memory of one store (module docstring).
RECORD_CACHE_ENTRIES_MAX: Final = 8_192
RECORD_CACHE_BYTES_MAX: Final = 32 * 1024 * 1024
# Watched objects are a handful of pointers per store; the bound only guards against a leak.
WATCHED_OBJECTS_MAX: Final = 1_024


@dataclass(frozen=True, slots=True)
class Watched:
    """The last version of a watched object this process read: its e_tag and decoded value."""

    e_tag: str
    value: object


class RecordCache:
    """One store's verified immutable records (LRU) and watched objects (module docstring)."""

    def __init__(
        self,
        *,
        entries_max: int = RECORD_CACHE_ENTRIES_MAX,
        bytes_max: int = RECORD_CACHE_BYTES_MAX,
    ) -> None:
        assert entries_max >= 1 and bytes_max >= 1
        self.entries_max, self.bytes_max = entries_max, bytes_max
        self._records: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._watched: OrderedDict[str, Watched] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._records)

    @property
    def size_bytes(self) -> int:
        """The stored encodings' bytes of the remembered records."""
        return self._bytes

    def cached(self, key: str, type_: type[T]) -> T | None:
        """The remembered record at `key` if it is a `type_`, else None (a miss)."""
        found = self._records.get(key)
        if found is None or not isinstance(found[0], type_):
            self.misses += 1
            return None
        self._records.move_to_end(key)
        self.hits += 1
        return found[0]

    def remember(self, key: str, value: object, size_bytes: int) -> None:
        """Remember the verified immutable record at `key` (`size_bytes`: its encoding)."""
        assert size_bytes >= 0
        if size_bytes > self.bytes_max:
            return  # larger than the whole bound: never kept
        self.forget(key)
        self._records[key] = (value, size_bytes)
        self._bytes += size_bytes
        while len(self._records) > self.entries_max or self._bytes > self.bytes_max:
            _, (_, evicted) = self._records.popitem(last=False)
            self._bytes -= evicted

    async def read_through(
        self, key: str, type_: type[T], load: Callable[[], Awaitable[tuple[T, int] | None]]
    ) -> T | None:
        """The remembered record at `key`, else `load()`'s (record, encoded size), remembered;
        None (not remembered) when `load` finds nothing, and a load that raises remembers
        nothing. Concurrent cold reads of one key each load it (no single flight: a stalled
        read must not hold up a reader with its own deadline)."""
        hit = self.cached(key, type_)
        if hit is not None:
            return hit
        loaded = await load()
        if loaded is None:
            return None
        value, size_bytes = loaded
        self.remember(key, value, size_bytes)
        return value

    def forget(self, key: str) -> None:
        """Drop `key` (this process deleted it, or it must be read again)."""
        found = self._records.pop(key, None)
        if found is not None:
            self._bytes -= found[1]
        self._watched.pop(key, None)

    def watched(self, key: str) -> Watched | None:
        """The last version of `key` read through `read_watched`, if any."""
        return self._watched.get(key)

    def watch(self, key: str, e_tag: str | None, value: object) -> None:
        """Remember `value` as `key`'s version `e_tag` (forgotten when there is no e_tag)."""
        self._watched.pop(key, None)
        if e_tag is None:
            return
        self._watched[key] = Watched(e_tag, value)
        while len(self._watched) > WATCHED_OBJECTS_MAX:
            self._watched.popitem(last=False)

    def clear(self) -> None:
        self._records.clear()
        self._watched.clear()
        self._bytes = 0


class RecordCachingStore(ForwardingStore):
    """`inner`, unchanged, with a `RecordCache` (`records`) for the readers above it. A write
    or delete through this wrapper forgets what the cache held for its key first, so this
    process's own deletes (a history prune) and rewrites are seen by its own later reads."""

    def __init__(self, inner: ObjectStore, records: RecordCache | None = None) -> None:
        super().__init__(inner)
        self.records = records or RecordCache()

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        self.records.forget(key)
        return await super().put(key, body, mode)

    async def delete(self, key: str) -> None:
        self.records.forget(key)
        await super().delete(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.records.forget(key)
        await super().delete_many(keys)


def caching(store: ObjectStore) -> RecordCachingStore:
    """`store` if it already carries a cache, else a new wrapper (with a new, empty cache)."""
    return store if isinstance(store, RecordCachingStore) else RecordCachingStore(store)


def record_cache(store: ObjectStore) -> RecordCache | None:
    """The cache `store` carries; None for a store without one (nothing is cached)."""
    return store.records if isinstance(store, RecordCachingStore) else None


async def read_watched(
    store: ObjectStore,
    key: str,
    decode: Callable[[GetResult], T],
    type_: type[T],
    *,
    max_bytes: int,
) -> tuple[T, str | None] | None:
    """The current value of the small mutable object `key` with the e_tag of its version, or
    None if it is absent.

    With a remembered version, one conditional GET: unchanged, the remembered value; changed,
    `decode(result)` (which checks the size against its bound, decodes and validates, raising
    on bad bytes), remembered with its e_tag. Without one, a GET of at most `max_bytes + 1`
    bytes. A value that failed to decode is not remembered, so every later read fails the same
    way until the object is fixed.
    """
    cache = record_cache(store)
    known = None if cache is None else cache.watched(key)
    try:
        if known is not None and isinstance(known.value, type_):
            result = await store.get_if_changed(key, known.e_tag)
            if result is None:
                return known.value, known.e_tag
        else:
            result = await store.get(key, end=max_bytes + 1)
    except ObjectNotFound:
        if cache is not None:
            cache.forget(key)
        return None
    value = decode(result)
    if cache is not None:
        cache.watch(key, result.meta.e_tag, value)
    return value, result.meta.e_tag
