"""A store wrapper that counts requests by operation and errors by kind (benchmarks, metrics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import TypeVar

from laminar_cluster.store.api import ObjectStore
from laminar_cluster.store.forwarding import ForwardingStore

T = TypeVar("T")


class CountingStore(ForwardingStore):
    """Counts every request to `inner` in `requests[op]` and failures in `errors[ErrorName]`."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def reset(self) -> None:
        self.requests.clear()
        self.errors.clear()

    def _count(self, op: str, error: BaseException | None = None, requests: int = 1) -> None:
        self.requests[op] += requests
        if error is not None:
            self.errors[type(error).__name__] += 1

    async def _forward(self, op: str, call: Awaitable[T]) -> T:
        return await self._forward_many(op, 1, call)

    async def _forward_many(self, op: str, requests: int, call: Awaitable[T]) -> T:
        try:
            result = await call
        except Exception as error:
            self._count(op, error, requests)
            raise
        self._count(op, None, requests)
        return result
