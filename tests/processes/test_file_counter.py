"""FS-4 across processes: 8 spawned processes CAS-increment one file:// counter to exactly 1600."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path

import pytest

from laminar_cluster.store.api import CREATE
from laminar_cluster.store.file_backend import FileStore
from tests.processes import workers

PROCESSES = 8
INCREMENTS_PER_PROCESS = 200
ATTEMPTS_MAX = 10_000  # per increment
KEY = "counters/shared"
RESULT_TIMEOUT_S = 240


@pytest.mark.processes
def test_fs4_eight_processes_cas_counter_exact(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = FileStore(root, fsync=True)
    asyncio.run(store.put(KEY, b"0", CREATE))
    context = multiprocessing.get_context("spawn")  # never fork: asyncio and threads
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    args = (root, KEY, INCREMENTS_PER_PROCESS, ATTEMPTS_MAX, True, barrier, results)
    processes = [
        context.Process(target=workers.count_up, args=args, name=f"counter-{index}")
        for index in range(PROCESSES)
    ]
    started_s = time.monotonic()
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
    elapsed_s = time.monotonic() - started_s

    errors = [error for _, _, _, error in outcomes if error is not None]
    assert errors == []
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    total = PROCESSES * INCREMENTS_PER_PROCESS
    assert sum(len(written) for _, written, _, _ in outcomes) == total
    # Every value 1..1600 was written by exactly one successful CAS: no update was lost.
    assert sorted(value for _, written, _, _ in outcomes for value in written) == list(
        range(1, total + 1)
    )
    final = asyncio.run(store.get(KEY))
    assert final.body == b"%d" % total
    retries = sum(retries for _, _, retries, _ in outcomes)
    print(f"{total} increments by {PROCESSES} processes in {elapsed_s:.1f} s, {retries} retries")
