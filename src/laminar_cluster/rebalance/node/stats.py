"""Store requests of a rebalance node, counted by purpose (for `bench rebalance`, `bench cost`
and operators).

Each long-running task of the node names its purpose once (`counting_as("watcher")`); the
`contextvars` copy every task makes at creation carries it into every request the task (and any
task it starts) makes. A step inside a task that serves another purpose (the checkpoint
leader's retention walk, a restore in the engine's task) names it for its own duration only
(`with counted_as("retention"):`). `PurposeCountingStore` counts each request under the purpose
current at the call, and also by (purpose, kind), so the leader's rotation work and a
follower's watcher are measured apart from the steady renewal and discovery traffic, and each
purpose can be priced (a PUT costs 12.5 times a GET on S3). It also counts by the object family
a request names (the key's first segment: `checkpoints`, `control`, `membership`, `events`,
...; a listing by its prefix's), whatever task made it: a protocol's own objects, for budgets
stated per object family (the distributed checkpoint's 3P + 10 per checkpoint).
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult
from laminar_cluster.store.counting import CountingStore

UNNAMED: Final = "other"
_PURPOSE: Final = contextvars.ContextVar("laminar_store_purpose", default=UNNAMED)
_FAMILY: Final = contextvars.ContextVar("laminar_store_family", default="")


# A family's polled pointer (`checkpoints/pointer.json`) is a family of its own: its reads run
# whether or not there is work, so budgets count them per second, apart from the protocol's
# per-operation requests.
_POINTER: Final = "pointer.json"


def family_of(key: str) -> str:
    """The object family of a key or prefix: its first segment (`""` for the whole store); a
    family's polled pointer `{family}/pointer.json` is `{family}/pointer`."""
    family, _, rest = key.partition("/")
    return f"{family}/pointer" if rest == _POINTER else family


@contextmanager
def _naming(key: str) -> Iterator[None]:
    token = _FAMILY.set(family_of(key))
    try:
        yield
    finally:
        _FAMILY.reset(token)


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
        self.by_family_kind: Counter[tuple[str, str]] = Counter()

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
        objects: dict[str, dict[str, int]] = {}
        for (family, op), count in sorted(self.by_family_kind.items()):
            objects.setdefault(family, {})[op] = count
        figures["objects"] = objects
        figures["total"] = self.total
        return figures

    def _count(self, op: str, error: BaseException | None = None, requests: int = 1) -> None:
        super()._count(op, error, requests)
        purpose = _PURPOSE.get()
        self.by_purpose[purpose] += requests
        self.by_purpose_kind[purpose, op] += requests
        self.by_family_kind[_FAMILY.get(), op] += requests

    # Each request names its object family for `_count` (module docstring).
    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        with _naming(key):
            return await super().get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        with _naming(key):
            return await super().head(key)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        with _naming(key):
            return await super().put(key, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        with _naming(prefix):
            return await super().list(prefix, offset=offset, limit=limit)

    async def delete(self, key: str) -> None:
        with _naming(key):
            await super().delete(key)

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        with _naming(key):
            return await super().get_if_changed(key, e_tag)

    async def get_range(self, key: str, start: int, end: int) -> GetResult:
        with _naming(key):
            return await super().get_range(key, start, end)

    async def delete_many(self, keys: Sequence[str]) -> None:
        with _naming(keys[0] if keys else ""):
            await super().delete_many(keys)
