"""`MetricsStore`: an `ObjectStore` that counts every request and every failure into a
`NodeMetrics` (`laminar_store_requests_total{op}`, `laminar_store_errors_total{op,kind}`).

It delegates each call unchanged and re-raises every error unchanged; `kind` is the exception's
class name (`StoreUnavailable`, `WriteOutcomeUnknown`, `PreconditionFailed`, ...), so expected
race answers (a create conflict) are counted apart from outages. A `get` or `head` answered
`ObjectNotFound` is not an error at all: reading an object that may be absent is how the
protocols ask (a pointer not yet written, a record pruned meanwhile), so only real failures
fill the errors counter. A request is counted once it finishes, with or without an error; a
cancelled request is counted, not as an error.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final, TypeVar

from laminar_cluster.errors import ObjectNotFound
from laminar_cluster.metrics.node_metrics import NodeMetrics
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.forwarding import ForwardingStore

T = TypeVar("T")
# Reads whose not-found answer is an expected answer, not a failure.
EXPECTED_ABSENT_OPS: Final = frozenset({"get", "head"})


class MetricsStore(ForwardingStore):
    """Counts the requests to `inner` in `metrics`; otherwise exactly `inner`."""

    def __init__(self, inner: ObjectStore, metrics: NodeMetrics) -> None:
        super().__init__(inner)
        self.metrics = metrics

    async def _forward(self, op: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except ObjectNotFound:
            if op not in EXPECTED_ABSENT_OPS:
                self.metrics.store_error(op, ObjectNotFound.__name__)
            raise
        except Exception as error:
            self.metrics.store_error(op, type(error).__name__)
            raise
        finally:
            self.metrics.store_request(op)
