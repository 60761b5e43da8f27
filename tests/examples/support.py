"""Running an example job for real: events into a file:// store's record log through the public
`Producer`, `laminar-cluster node --job` processes, and the results read back with DuckDB and
psycopg; plus the independent computations the results are held against."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from laminar_cluster import Producer, partition_of_key
from laminar_cluster.harness.fleet import STREAM_NODE_TIMINGS, NodeFleet
from laminar_cluster.store import open_store

PARTITIONS = 256


def produce(url: str, events: Sequence[dict[str, Any]], key: str) -> None:
    """Append `events` to the store's record log, keyed by field `key`."""

    async def run() -> None:
        store = open_store(url)
        try:
            async with Producer(store, partitions=PARTITIONS) as producer:
                for event in events:
                    await producer.send(event[key], event)
        finally:
            await store.close()

    asyncio.run(run())


@contextmanager
def job_fleet(
    url: str, workdir: Path, job: str, nodes: Sequence[int], *, idle_close_s: float = 2.0
) -> Iterator[NodeFleet]:
    """Node processes running `job` (module:attribute) on `url`."""
    args = ["--job", job, "--close-idle-windows", str(idle_close_s)]
    with NodeFleet(url, workdir, STREAM_NODE_TIMINGS) as fleet:
        for node in nodes:
            fleet.start(node, args)
        yield fleet


def wait_for(fleet: NodeFleet, what: str, done: Callable[[], bool], timeout_s: float) -> None:
    """Until `done()`, failing with the nodes' last log lines after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not after {timeout_s} s\n{fleet.tail(30)}")
        time.sleep(0.5)


def query(sql: str) -> list[tuple[Any, ...]]:
    """DuckDB's rows for `sql`; [] while the files it reads do not exist yet."""
    try:
        return duckdb.sql(sql).fetchall()
    except duckdb.IOException:
        return []


def per_partition(events: Sequence[dict[str, Any]], key: str) -> dict[int, list[dict[str, Any]]]:
    """The events as each vnode sees them: by the key's partition, in the order produced."""
    parts: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        parts.setdefault(partition_of_key(event[key], PARTITIONS), []).append(event)
    return parts


def tumbling_reference(
    events: Sequence[dict[str, Any]], key: str, size_ms: int, out_of_order_ms: int
) -> tuple[Counter[tuple[str, int]], list[dict[str, Any]]]:
    """Counts per (key, window start) and the late events, computed directly from the rule in
    docs/jobs.md: per vnode, the watermark is the greatest event time seen minus the
    out-of-orderness; an event whose window ended at or before the watermark is late."""
    counts: Counter[tuple[str, int]] = Counter()
    late: list[dict[str, Any]] = []
    for part in per_partition(events, key).values():
        watermark = None
        for event in part:
            start = event["ts_ms"] // size_ms * size_ms
            if watermark is not None and start + size_ms <= watermark:
                late.append(event)
            else:
                counts[(event[key], start)] += 1
            seen = event["ts_ms"] - out_of_order_ms
            watermark = seen if watermark is None else max(watermark, seen)
    return counts, late


def sessions_reference(
    events: Sequence[dict[str, Any]], key: str, gap_ms: int
) -> list[tuple[str, int, int, int, int]]:
    """(key, first, last + gap, views, max page) per session of in-order events."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_key.setdefault(event[key], []).append(event)
    sessions = []
    for name, views in by_key.items():
        views.sort(key=lambda v: v["ts_ms"])
        group = [views[0]]
        for view in views[1:]:
            if view["ts_ms"] - group[-1]["ts_ms"] >= gap_ms:
                sessions.append(_session(name, group, gap_ms))
                group = []
            group.append(view)
        sessions.append(_session(name, group, gap_ms))
    return sorted(sessions)


def _session(name: str, group: list[dict[str, Any]], gap_ms: int) -> tuple[str, int, int, int, int]:
    first, last = group[0]["ts_ms"], group[-1]["ts_ms"]
    return (name, first, last + gap_ms, len(group), max(v["page"] for v in group))
