"""Process workers for the checkpoint ID tests: module-level, so `spawn` pickles them by name."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import RealClock
from laminar_cluster.clock.retry import retry_until
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.store import open_store


async def _allocate(url: str, allocations: int, deadline_s: float) -> tuple[list[int], int]:
    """Allocate `allocations` IDs, retrying StoreUnavailable as a coordinator does (the moto
    server answers some requests 500 under load); return (ids, failed attempts)."""
    clock = RealClock()
    store = open_store(url)
    instance = DecisionStore.shared(store, clock=clock)
    deadline = clock.monotonic() + deadline_s
    failures = 0

    async def allocate_once() -> int:
        nonlocal failures
        try:
            return await instance.allocate_checkpoint_id(deadline=deadline)
        except StoreUnavailable:
            failures += 1
            raise

    try:
        ids = [
            await retry_until(allocate_once, what="allocate", clock=clock, deadline=deadline)
            for _ in range(allocations)
        ]
        return ids, failures
    finally:
        await store.close()


def allocate_ids(url: str, allocations: int, deadline_s: float, barrier: Any, results: Any) -> None:
    """Process entry point: wait for every worker, allocate; put (pid, ids, failures, error)."""
    try:
        barrier.wait(timeout=120)
        ids, failures = asyncio.run(_allocate(url, allocations, deadline_s))
    except BaseException as error:
        results.put((os.getpid(), [], 0, repr(error)))
        raise
    results.put((os.getpid(), ids, failures, None))
