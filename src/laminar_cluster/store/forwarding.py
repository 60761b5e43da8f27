"""`ForwardingStore`: an `ObjectStore` that sends every call to `inner` through one hook.

Wrappers that observe requests (counters, metrics) subclass it and override `_forward`; the
default passes the call through unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from laminar_cluster.store.api import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult

T = TypeVar("T")


class ForwardingStore(ObjectStore):
    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    async def _forward(self, op: str, call: Awaitable[T]) -> T:
        return await call

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self._forward("get", self.inner.get(key, end=end))

    async def head(self, key: str) -> ObjectMeta:
        return await self._forward("head", self.inner.head(key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self._forward("put", self.inner.put(key, body, mode))

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self._forward("list", self.inner.list(prefix, offset=offset, limit=limit))

    async def delete(self, key: str) -> None:
        await self._forward("delete", self.inner.delete(key))

    async def close(self) -> None:
        await self.inner.close()
