"""Worker functions for process tests: module-level, so `spawn` can pickle them by reference."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from laminar_cluster.errors import PreconditionFailed
from laminar_cluster.store.file_backend import FileStore


async def increment_counter(store: FileStore, key: str, attempts_max: int) -> tuple[int, int]:
    """Add one to the decimal counter at `key` by read -> IfMatch update; return (value, retries).

    On PreconditionFailed (another writer won) it re-reads and retries, at most attempts_max times.
    """
    for attempt in range(attempts_max):
        current = await store.get(key)
        value = int(current.body) + 1
        try:
            await store.put(key, b"%d" % value, current.meta.token)
        except PreconditionFailed:
            continue
        return value, attempt
    raise RuntimeError(f"{key}: no increment in {attempts_max} attempts")


async def _count_up(
    root: str, key: str, increments: int, attempts_max: int, fsync: bool
) -> tuple[list[int], int]:
    store = FileStore(root, fsync=fsync)
    written: list[int] = []
    retries_total = 0
    for _ in range(increments):
        value, retries = await increment_counter(store, key, attempts_max)
        written.append(value)
        retries_total += retries
    return written, retries_total


def count_up(
    root: str,
    key: str,
    increments: int,
    attempts_max: int,
    fsync: bool,
    barrier: Any,
    results: Any,
) -> None:
    """Process entry point: wait for all workers, increment, put (pid, values, retries, error)."""
    try:
        barrier.wait(timeout=120)
        written, retries = asyncio.run(_count_up(root, key, increments, attempts_max, fsync))
    except BaseException as error:
        results.put((os.getpid(), [], 0, repr(error)))
        raise
    results.put((os.getpid(), written, retries, None))
