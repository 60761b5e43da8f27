"""`MetricsStore` (metrics/counted_store.py): every request counted by operation, every failure
by operation and exception class, over a `FaultyStore`; results and errors pass unchanged."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.metrics import MetricsStore, NodeMetrics
from laminar_cluster.store import CREATE, OVERWRITE, open_store
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore


def test_requests_and_errors_by_kind_through_a_faulty_store() -> None:
    async def main() -> NodeMetrics:
        metrics = NodeMetrics()
        faulty = FaultyStore(open_store("memory://"), clock=SimulatedClock(seed=3), seed=3)
        store = MetricsStore(faulty, metrics)
        await store.put("a/1", b"one", CREATE)
        assert (await store.get("a/1")).body == b"one"
        with pytest.raises(ObjectAlreadyExists):
            await store.put("a/1", b"again", CREATE)
        with pytest.raises(ObjectNotFound):
            await store.get("a/missing")
        faulty.fail_next(FaultKind.BEFORE, op="get")
        with pytest.raises(StoreUnavailable):
            await store.get("a/1")
        faulty.fail_next(FaultKind.AFTER, op="put")
        with pytest.raises(WriteOutcomeUnknown):
            await store.put("a/2", b"two", OVERWRITE)
        assert [m.key for m in await store.list("a/")] == ["a/1", "a/2"]  # the put applied
        assert (await store.head("a/2")).size == 3
        await store.delete("a/1")
        faulty.fail_next(FaultKind.BEFORE, op="delete")
        with pytest.raises(StoreUnavailable):
            await store.delete("a/2")
        assert store.url == faulty.url
        await store.close()
        return metrics

    metrics = asyncio.run(main())
    requests = {
        op: metrics.value("laminar_store_requests_total", {"op": op})
        for op in ("get", "head", "put", "list", "delete")
    }
    assert requests == {"get": 3, "head": 1, "put": 3, "list": 1, "delete": 2}
    errors = {
        (op, kind): metrics.value("laminar_store_errors_total", {"op": op, "kind": kind})
        for op, kind in [
            ("put", "ObjectAlreadyExists"),
            ("get", "StoreUnavailable"),
            ("put", "WriteOutcomeUnknown"),
            ("delete", "StoreUnavailable"),
        ]
    }
    assert set(errors.values()) == {1}
    assert (
        metrics.value("laminar_store_errors_total", {"op": "list", "kind": "StoreUnavailable"})
        is None
    )
    # An expected not-found read is a request, never an error (issue 17).
    assert (
        metrics.value("laminar_store_errors_total", {"op": "get", "kind": "ObjectNotFound"}) is None
    )


def test_a_cancelled_request_is_counted_but_not_as_an_error() -> None:
    async def main() -> NodeMetrics:
        metrics = NodeMetrics()
        clock = SimulatedClock(seed=1)
        slow = FaultyStore(
            open_store("memory://"),
            clock=clock,
            seed=1,
            config=FaultConfig(latency_s_min=10.0, latency_s_max=10.0),
        )
        store = MetricsStore(slow, metrics)  # every request sleeps 10 simulated s
        async with asyncio.TaskGroup() as group:
            task = group.create_task(store.get("x"))
            await asyncio.sleep(0)
            task.cancel()
        return metrics

    metrics = asyncio.run(main())
    assert metrics.value("laminar_store_requests_total", {"op": "get"}) == 1
    assert "laminar_store_errors_total{" not in metrics.exposition().decode()
