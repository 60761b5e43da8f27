"""`laminar-cluster bench checkpoint-ids`: checkpoint ID allocation and outcome record costs.

Measures (CD §4.3, CD §4.4):

* local-mode allocations per second: `DecisionStore.local_filesystem` on a fresh temporary
  directory with fsync on (one durable block claim per 65,536 IDs; the rest is in memory);
* shared-mode (NativeCas) allocations per second on the given store, and the store requests
  each allocation costs (counted by `CountingStore`; 1 put when the head is cached);
* latency p50/p99 of `record_outcome(scope=local, commit)` on the given store, one per
  allocated ID, and its requests per record.

The shared namespace is fresh: every key lives under `bench/checkpoint-ids/<uuid>/` of the store
(`_PrefixedStore`), so the bench runs on a store that holds other data, and its objects are
deleted at the end.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from typing import Any

from laminar_cluster.bench.store import percentile
from laminar_cluster.checkpoint import CheckpointScope, CheckpointVerdict, DecisionStore
from laminar_cluster.clock import RealClock
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.views.output import run_on_store

_DEADLINE_S = 600.0


class _PrefixedStore(ObjectStore):
    """Every key of `inner` under `prefix` (which ends in `/`): a fresh namespace in any store."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    @property
    def url(self) -> str:
        return f"{self.inner.url} (under {self.prefix})"

    def _strip(self, meta: ObjectMeta) -> ObjectMeta:
        return ObjectMeta(
            key=meta.key[len(self.prefix) :],
            size=meta.size,
            e_tag=meta.e_tag,
            version=meta.version,
            last_modified_ms=meta.last_modified_ms,
        )

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        got = await self.inner.get(self.prefix + key, end=end)
        return GetResult(meta=self._strip(got.meta), body=got.body)

    async def head(self, key: str) -> ObjectMeta:
        return self._strip(await self.inner.head(self.prefix + key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self.inner.put(self.prefix + key, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        inner_offset = None if offset is None else self.prefix + offset
        found = await self.inner.list(self.prefix + prefix, offset=inner_offset, limit=limit)
        return [self._strip(meta) for meta in found]

    async def delete(self, key: str) -> None:
        await self.inner.delete(self.prefix + key)


async def _bench_local(count: int) -> dict[str, Any]:
    clock = RealClock()
    with tempfile.TemporaryDirectory(prefix="laminar-bench-ids-") as root:
        instance = DecisionStore.local_filesystem(root, clock=clock, fsync=True)
        deadline = clock.monotonic() + _DEADLINE_S
        allocate = instance.allocate_checkpoint_id
        await instance.load_or_create_deployment_id()
        started = time.perf_counter()
        for _ in range(count):
            await allocate(deadline=deadline)
        elapsed_s = time.perf_counter() - started
        await instance.store.close()
    return {
        "local_allocations": count,
        "local_elapsed_s": round(elapsed_s, 4),
        "local_allocations_per_s": round(count / elapsed_s, 1) if elapsed_s > 0 else None,
    }


async def _bench_shared(store: CountingStore, count: int) -> tuple[dict[str, Any], list[int]]:
    clock = RealClock()
    instance = DecisionStore.shared(store, clock=clock)
    await instance.load_or_create_deployment_id()  # creates the identity: not an allocation
    store.reset()
    deadline = clock.monotonic() + _DEADLINE_S
    ids: list[int] = []
    started = time.perf_counter()
    for _ in range(count):
        ids.append(await instance.allocate_checkpoint_id(deadline=deadline))
    elapsed_s = time.perf_counter() - started
    figures = {
        "shared_allocations": count,
        "shared_elapsed_s": round(elapsed_s, 4),
        "shared_allocations_per_s": round(count / elapsed_s, 1) if elapsed_s > 0 else None,
        "shared_requests_per_allocation": round(store.total / count, 3),
        "shared_store_requests": dict(store.requests),
    }
    return figures, ids


async def _bench_outcomes(store: CountingStore, count: int) -> dict[str, Any]:
    clock = RealClock()
    instance = DecisionStore.shared(store, clock=clock)
    deadline = clock.monotonic() + _DEADLINE_S
    ids = [await instance.allocate_checkpoint_id(deadline=deadline) for _ in range(count)]
    store.reset()
    latencies_s: list[float] = []
    try:
        for checkpoint_id in ids:
            before = time.perf_counter()
            await instance.record_outcome(
                epoch=checkpoint_id,
                checkpoint_id=checkpoint_id,
                scope=CheckpointScope.LOCAL,
                verdict=CheckpointVerdict.COMMIT,
            )
            latencies_s.append(time.perf_counter() - before)
    except NotImplementedError:
        return {"outcome_records": 0, "outcome_p50_ms": None, "outcome_p99_ms": None}
    ordered = sorted(latencies_s)
    return {
        "outcome_records": count,
        "outcome_p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
        "outcome_p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
        "outcome_requests_per_record": round(store.total / count, 3),
    }


async def bench_checkpoint_ids(
    store: ObjectStore, *, local_ids: int, shared_ids: int, outcomes: int
) -> dict[str, Any]:
    """The figures of one run; shared-mode work goes to a fresh prefix of `store`."""
    for name, value in (("local_ids", local_ids), ("shared_ids", shared_ids)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if outcomes < 0:
        raise ValueError(f"outcomes must be at least 0, not {outcomes}")
    prefix = f"bench/checkpoint-ids/{uuid.uuid4().hex}/"
    prefixed = _PrefixedStore(store, prefix)
    figures: dict[str, Any] = {"store": store.url, "namespace": prefix}
    figures.update(await _bench_local(local_ids))
    try:
        shared, _ = await _bench_shared(CountingStore(prefixed), shared_ids)
        figures.update(shared)
        if outcomes:
            figures.update(await _bench_outcomes(CountingStore(prefixed), outcomes))
        else:
            figures.update({"outcome_records": 0, "outcome_p50_ms": None, "outcome_p99_ms": None})
    finally:
        for meta in await prefixed.list(""):
            await prefixed.delete(meta.key)
    return figures


def run_bench_checkpoint_ids(
    url: str, *, local_ids: int, shared_ids: int, outcomes: int
) -> dict[str, Any]:
    """Run the bench on the store `url` names; return its figures (JSON-ready)."""
    return run_on_store(
        url,
        lambda store: bench_checkpoint_ids(
            store, local_ids=local_ids, shared_ids=shared_ids, outcomes=outcomes
        ),
    )
