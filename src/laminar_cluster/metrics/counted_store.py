"""`MetricsStore`: an `ObjectStore` that counts every request and every failure into a
`NodeMetrics` (`laminar_store_requests_total{op}`, `laminar_store_errors_total{op,kind}`).

It delegates each call unchanged and re-raises every error unchanged; `kind` is the exception's
class name (`StoreUnavailable`, `WriteOutcomeUnknown`, `PreconditionFailed`, ...), so expected
race answers (a create conflict) are counted apart from outages. A request is counted once it
finishes, with or without an error; a cancelled request is counted, not as an error.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from laminar_cluster.metrics.node_metrics import NodeMetrics
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult

T = TypeVar("T")


class MetricsStore(ObjectStore):
    """Counts the requests to `inner` in `metrics`; otherwise exactly `inner`."""

    def __init__(self, inner: ObjectStore, metrics: NodeMetrics) -> None:
        self.inner = inner
        self.metrics = metrics

    @property
    def url(self) -> str:
        return self.inner.url

    async def _counted(self, op: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except Exception as error:
            self.metrics.store_error(op, type(error).__name__)
            raise
        finally:
            self.metrics.store_request(op)

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
