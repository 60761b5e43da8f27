"""A store wrapper for the views: reads pass through, every write is refused before it reaches
the store, so no path below a view (a head repair, a deployment identity create) can write."""

from __future__ import annotations

from laminar_cluster.errors import NotSupported
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult


class ReadOnlyStore(ObjectStore):
    """`inner` for reads; every write is refused before it reaches the store."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        return await self.inner.head(key)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        raise NotSupported(f"{key}: status is read-only; refused a put", key=key)

    async def delete(self, key: str) -> None:
        raise NotSupported(f"{key}: status is read-only; refused a delete", key=key)

    async def close(self) -> None:
        await self.inner.close()
