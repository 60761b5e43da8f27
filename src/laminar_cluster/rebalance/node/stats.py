"""Store requests of a rebalance node, counted by purpose (for `bench rebalance` and operators).

Each long-running task of the node names its purpose once (`counting_as("watcher")`); the
`contextvars` copy every task makes at creation carries it into every request the task (and any
task it starts) makes. `PurposeCountingStore` counts each request under the purpose current at
the call, so the leader's rotation work and a follower's watcher are measured apart from the
steady renewal and discovery traffic.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from typing import Final

from laminar_cluster.store import ObjectStore
from laminar_cluster.store.counting import CountingStore

UNNAMED: Final = "other"
_PURPOSE: Final = contextvars.ContextVar("laminar_store_purpose", default=UNNAMED)


def counting_as(purpose: str) -> None:
    """Attribute the current task's requests (and those of tasks it starts later) to `purpose`."""
    _PURPOSE.set(purpose)


class PurposeCountingStore(CountingStore):
    """`CountingStore` plus `by_purpose[purpose]`, the number of requests made under it."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.by_purpose: Counter[str] = Counter()

    def count_of(self, purpose: str) -> int:
        return self.by_purpose[purpose]

    def snapshot(self) -> dict[str, int]:
        """Totals by purpose and by operation, JSON-ready."""
        figures = {f"purpose.{name}": count for name, count in sorted(self.by_purpose.items())}
        figures.update({f"op.{op}": count for op, count in sorted(self.requests.items())})
        figures["total"] = self.total
        return figures

    def _count(self, op: str, error: BaseException | None = None, requests: int = 1) -> None:
        super()._count(op, error, requests)
        self.by_purpose[_PURPOSE.get()] += requests
