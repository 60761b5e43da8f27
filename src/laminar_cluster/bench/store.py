"""`laminar-cluster bench store`: throughput and latency of create, get and conditional update."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from laminar_cluster.store import CREATE, IfMatch, ObjectStore
from laminar_cluster.views.output import run_on_store


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def summarize(latencies_s: list[float], elapsed_s: float) -> dict[str, float]:
    ordered = sorted(latencies_s)
    return {
        "ops": len(ordered),
        "ops_per_s": round(len(ordered) / elapsed_s, 1) if elapsed_s > 0 else float("inf"),
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
    }


async def _timed(count: int, operation: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    latencies: list[float] = []
    started = time.perf_counter()
    for index in range(count):
        before = time.perf_counter()
        await operation(index)
        latencies.append(time.perf_counter() - before)
    return summarize(latencies, time.perf_counter() - started)


async def bench_store(store: ObjectStore, *, ops: int) -> dict[str, Any]:
    run_prefix = f"bench/store/{uuid.uuid4().hex}/"
    payload = b"x" * 200  # about the size of a control record

    async def create(index: int) -> None:
        await store.put(f"{run_prefix}obj-{index:08d}", payload, CREATE)

    async def get(index: int) -> None:
        await store.get(f"{run_prefix}obj-{index:08d}")

    counter_key = f"{run_prefix}counter"
    token = await store.put(counter_key, _body(0), CREATE)
    state = {"e_tag": token.e_tag, "version": token.version}

    async def update(index: int) -> None:
        result = await store.put(
            counter_key, _body(index + 1), IfMatch(state["e_tag"], state["version"])
        )
        state["e_tag"], state["version"] = result.e_tag, result.version

    results = {
        "create": await _timed(ops, create),
        "get": await _timed(ops, get),
        "conditional_update": await _timed(ops, update),
    }
    for key in [f"{run_prefix}obj-{i:08d}" for i in range(ops)] + [counter_key]:
        await store.delete(key)
    return {"store": store.url, "payload_bytes": len(payload), "results": results}


def _body(value: int) -> bytes:
    return json.dumps({"value": value, "nonce": uuid.uuid4().hex}).encode()


def run_bench_store(url: str, *, ops: int) -> dict[str, Any]:
    return run_on_store(url, lambda store: bench_store(store, ops=ops))
