"""Store requests of a rebalance node, counted by purpose (for `bench rebalance`, `bench cost`
and operators).

Each long-running task of the node names its purpose once (`counting_as("watcher")`); the
`contextvars` copy every task makes at creation carries it into every request the task (and any
task it starts) makes. A step inside a task that serves another purpose (the checkpoint
leader's retention walk, a restore in the engine's task) names it for its own duration only
(`with counted_as("retention"):`). `PurposeCountingStore` counts each request under the purpose
current at the call, and also by (purpose, kind), so the leader's rotation work and a
follower's watcher are measured apart from the steady renewal and discovery traffic, and each
purpose can be priced (a PUT costs 12.5 times a GET on S3).
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from laminar_cluster.store import ObjectStore
from laminar_cluster.store.counting import CountingStore

UNNAMED: Final = "other"
_PURPOSE: Final = contextvars.ContextVar("laminar_store_purpose", default=UNNAMED)


def counting_as(purpose: str) -> None:
    """Attribute the current task's requests (and those of tasks it starts later) to `purpose`."""
    _PURPOSE.set(purpose)


@contextmanager
def counted_as(purpose: str) -> Iterator[None]:
    """Attribute the requests made inside the block (and by tasks started in it) to `purpose`,
    then go back to the task's own purpose."""
    token = _PURPOSE.set(purpose)
    try:
        yield
    finally:
        _PURPOSE.reset(token)


class PurposeCountingStore(CountingStore):
    """`CountingStore` plus `by_purpose[purpose]`, the number of requests made under it, and
    `by_purpose_kind[(purpose, op)]`."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.by_purpose: Counter[str] = Counter()
        self.by_purpose_kind: Counter[tuple[str, str]] = Counter()

    def count_of(self, purpose: str) -> int:
        """Requests made under `purpose` so far."""
        return self.by_purpose[purpose]

    def snapshot(self) -> dict[str, object]:
        """Totals by purpose and by operation (flat keys), `counts` by purpose then operation,
        and the total; JSON-ready."""
        figures: dict[str, object] = {
            f"purpose.{name}": count for name, count in sorted(self.by_purpose.items())
        }
        figures.update({f"op.{op}": count for op, count in sorted(self.requests.items())})
        counts: dict[str, dict[str, int]] = {}
        for (purpose, op), count in sorted(self.by_purpose_kind.items()):
            counts.setdefault(purpose, {})[op] = count
        figures["counts"] = counts
        figures["total"] = self.total
        return figures

    def _count(self, op: str, error: BaseException | None = None, requests: int = 1) -> None:
        super()._count(op, error, requests)
        purpose = _PURPOSE.get()
        self.by_purpose[purpose] += requests
        self.by_purpose_kind[purpose, op] += requests
