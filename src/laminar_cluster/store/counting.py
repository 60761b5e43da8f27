"""A store wrapper that counts requests by operation and errors by kind (benchmarks, metrics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import TypeVar

from laminar_cluster.store.api import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult

T = TypeVar("T")


class CountingStore(ObjectStore):
    """Counts every request to `inner` in `requests[op]` and failures in `errors[ErrorName]`."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def reset(self) -> None:
        self.requests.clear()
        self.errors.clear()

    def _count(self, op: str, error: BaseException | None = None) -> None:
        self.requests[op] += 1
        if error is not None:
            self.errors[type(error).__name__] += 1

    async def _counted(self, op: str, call: Awaitable[T]) -> T:
        try:
            result = await call
        except Exception as error:
            self._count(op, error)
            raise
        self._count(op)
        return result

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self._counted("get", self.inner.get(key, end=end))

    async def head(self, key: str) -> ObjectMeta:
        return await self._counted("head", self.inner.head(key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self._counted("put", self.inner.put(key, body, mode))

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self._counted("list", self.inner.list(prefix, offset=offset, limit=limit))

    async def delete(self, key: str) -> None:
        await self._counted("delete", self.inner.delete(key))

    async def close(self) -> None:
        await self.inner.close()
