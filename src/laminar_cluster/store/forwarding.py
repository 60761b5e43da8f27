"""`ForwardingStore`: an `ObjectStore` that sends every call to `inner` through one hook.

Wrappers that observe requests (counters, metrics) subclass it and override `_forward`; the
default passes the call through unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

from laminar_cluster.store.api import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    PutMode,
    PutResult,
    delete_requests,
)

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

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        return await self._forward("get", self.inner.get_if_changed(key, e_tag))

    async def get_range(self, key: str, start: int, end: int) -> GetResult:
        return await self._forward("get", self.inner.get_range(key, start, end))

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Forwarded as one `delete` per request S3 bills (`api.delete_requests`)."""
        await self._forward_many("delete", delete_requests(len(keys)), self.inner.delete_many(keys))

    async def _forward_many(self, op: str, requests: int, call: Awaitable[T]) -> T:
        """A call that costs `requests` requests of kind `op` (none: no request)."""
        return await call

    async def close(self) -> None:
        await self.inner.close()
