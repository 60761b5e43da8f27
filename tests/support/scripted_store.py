"""A store wrapper for tests that script exact faults (CD §8's "fault").

It can: defer a put (fail it as "lost before visibility" and apply it later), apply a put and
then fail it, reject conditional updates as not supported, block the next overwrite until
released, strip e_tags and versions from reads, forge the next read's body or size, reverse
listings, run a hook before every get, and count requests by operation.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from laminar_cluster.errors import NotSupported, WriteOutcomeUnknown
from laminar_cluster.store import (
    GetResult,
    IfMatch,
    ObjectMeta,
    ObjectStore,
    Overwrite,
    PutMode,
    PutResult,
)


@dataclass
class DeferredPut:
    """A put that failed as lost before visibility; `apply()` makes it happen now."""

    store: ObjectStore
    key: str
    body: bytes
    mode: PutMode

    async def apply(self) -> PutResult:
        return await self.store.put(self.key, self.body, self.mode)


@dataclass
class BlockedOverwrite:
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Forged:
    body: bytes | None
    size: int | None


class ScriptedStore(ObjectStore):
    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self.get_ends: list[int | None] = []
        self.deferred: list[DeferredPut] = []
        self.reject_updates = False
        self.strip_tokens = False
        self.reverse_lists = False
        self.before_get: Callable[[str], Awaitable[None]] | None = None
        self._defer: list[str] = []
        self._fail_after: list[str] = []
        self._blocked: list[tuple[str, BlockedOverwrite]] = []
        self._forged: dict[str, _Forged] = {}

    @property
    def url(self) -> str:
        return self.inner.url

    # scripting

    def defer_next_put(self, key_prefix: str) -> None:
        self._defer.append(key_prefix)

    def fail_next_put_after_apply(self, key_prefix: str) -> None:
        self._fail_after.append(key_prefix)

    def block_next_overwrite(self, key_prefix: str) -> BlockedOverwrite:
        blocked = BlockedOverwrite()
        self._blocked.append((key_prefix, blocked))
        return blocked

    def forge_next_get(
        self, key: str, *, body: bytes | None = None, size: int | None = None
    ) -> None:
        self._forged[key] = _Forged(body, size)

    # the store

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        self.requests["get"] += 1
        self.get_ends.append(end)
        if self.before_get is not None:
            await self.before_get(key)
        got = await self.inner.get(key, end=end)
        forged = self._forged.pop(key, None)
        if forged is not None:
            meta = (
                got.meta if forged.size is None else dataclasses.replace(got.meta, size=forged.size)
            )
            got = GetResult(meta=meta, body=got.body if forged.body is None else forged.body)
        if self.strip_tokens:
            got = GetResult(meta=_stripped(got.meta), body=got.body)
        return got

    async def head(self, key: str) -> ObjectMeta:
        self.requests["head"] += 1
        meta = await self.inner.head(key)
        return _stripped(meta) if self.strip_tokens else meta

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        self.requests["put"] += 1
        if self.reject_updates and isinstance(mode, IfMatch):
            raise NotSupported(f"{key}: PutMode::Update is not supported by this store", key=key)
        if _take(self._defer, key):
            self.deferred.append(DeferredPut(self.inner, key, body, mode))
            raise WriteOutcomeUnknown(f"{key}: put lost before visibility (deferred)", key=key)
        if isinstance(mode, Overwrite):
            for index, (prefix, blocked) in enumerate(self._blocked):
                if key.startswith(prefix):
                    del self._blocked[index]
                    blocked.reached.set()
                    await blocked.release.wait()
                    break
        result = await self.inner.put(key, body, mode)
        if _take(self._fail_after, key):
            raise WriteOutcomeUnknown(f"{key}: put lost after visibility", key=key)
        return result

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        self.requests["list"] += 1
        entries = await self.inner.list(prefix, offset=offset, limit=limit)
        return list(reversed(entries)) if self.reverse_lists else entries

    async def delete(self, key: str) -> None:
        self.requests["delete"] += 1
        await self.inner.delete(key)


def _take(prefixes: list[str], key: str) -> bool:
    for index, prefix in enumerate(prefixes):
        if key.startswith(prefix):
            del prefixes[index]
            return True
    return False


def _stripped(meta: ObjectMeta) -> ObjectMeta:
    return dataclasses.replace(meta, e_tag=None, version=None)
