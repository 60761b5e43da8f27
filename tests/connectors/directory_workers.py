"""Process workers for the plain-directory sink's several-process test
(test_file_directory.py): module-level, so `spawn` can pickle them by reference."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from typing import Any

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
from laminar_cluster.store import open_store
from tests.connectors.support import deadline, delivery

RESULT_TIMEOUT_S = 240


async def _deliver_all(
    url: str, prefix: str, parquet: bool, ids: list[tuple[int, int]], barrier: Any
) -> list[bool]:
    sink = ParquetSink(prefix, url=url) if parquet else JsonLinesSink(prefix, url=url)
    writer = sink.open(open_store("memory://"), RealClock())  # the directory is the target
    applied = []
    for checkpoint_id, node_id in ids:
        barrier.wait(timeout=120)  # every process starts this delivery at the same moment
        applied.append(await writer.deliver(delivery(checkpoint_id, node_id), deadline=deadline()))
    await writer.close()
    return applied


def deliver_ids(
    url: str, prefix: str, parquet: bool, ids: list[tuple[int, int]], barrier: Any, results: Any
) -> None:
    """Process entry point: deliver each (checkpoint, node) once, all workers together delivery
    by delivery; report (pid, what each deliver returned, error)."""
    try:
        applied = asyncio.run(_deliver_all(url, prefix, parquet, ids, barrier))
    except BaseException as error:
        results.put((os.getpid(), [], repr(error)))
        raise
    results.put((os.getpid(), applied, None))


def race(workers: int, *args: Any) -> list[tuple[int, list[bool], str | None]]:
    """Run `deliver_ids(*args, barrier, results)` in `workers` spawned processes; their reports."""
    context = multiprocessing.get_context("spawn")  # never fork: asyncio and threads
    barrier, results = context.Barrier(workers), context.Queue()
    processes = [
        context.Process(target=deliver_ids, args=(*args, barrier, results)) for _ in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=RESULT_TIMEOUT_S) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    assert [process.exitcode for process in processes] == [0] * workers
    return outcomes
