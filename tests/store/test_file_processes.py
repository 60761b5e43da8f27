"""The file store's invariants that are about several processes on one root
(docs/protocols/file-store.md): FS-1 (racing creates in several processes, exactly one wins each
key) and FS-5 (reads in other processes see one whole version while a process overwrites).
FS-4 across processes is tests/processes/test_file_counter.py."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.store.api import CREATE
from laminar_cluster.store.file_backend import FileStore
from tests.store import file_workers

RESULT_TIMEOUT_S = 240


def run_processes(
    targets: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], results: Any
) -> list[Any]:
    """Start one spawned process per (target, args), collect one result from each, join all."""
    context = multiprocessing.get_context("spawn")  # never fork: asyncio and threads
    processes = [context.Process(target=target, args=args) for target, args in targets]
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
    assert [process.exitcode for process in processes] == [0] * len(processes)
    return outcomes


@pytest.mark.processes
def test_fs1_racing_creates_in_several_processes_one_wins_each_key(tmp_path: Path) -> None:
    """6 processes create the same 40 keys, all of them at once for each key (a barrier per
    key): each key has exactly one creator, whose bytes it holds; every other create was
    refused with ObjectAlreadyExists."""
    root, workers = str(tmp_path / "store"), 6
    keys = [f"race/k{index:02}" for index in range(40)]
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(workers), context.Queue()
    args = (root, keys, barrier, results)
    outcomes = run_processes([(file_workers.create_keys, args)] * workers, results)

    assert [error for _, _, _, error in outcomes] == [None] * workers
    winners: dict[str, list[int]] = {key: [] for key in keys}
    for pid, won, _, _ in outcomes:
        for key in won:
            winners[key].append(pid)
    assert all(len(pids) == 1 for pids in winners.values()), winners
    assert sum(refused for _, _, refused, _ in outcomes) == (workers - 1) * len(keys)

    async def stored() -> dict[str, bytes]:
        store = FileStore(root, fsync=False)
        return {key: (await store.get(key)).body for key in keys}

    bodies = asyncio.run(stored())
    assert bodies == {
        key: file_workers.body_of_creator(key, pids[0]) for key, pids in winners.items()
    }
    assert os.listdir(tmp_path / "store" / "tmp") == []


@pytest.mark.processes
def test_fs5_other_processes_read_one_whole_version_during_overwrites(tmp_path: Path) -> None:
    """One process overwrites a key (bodies of varying length) while two others read it: every
    read is complete and its body is exactly the one written under the e_tag it reports."""
    root, key, readers = str(tmp_path / "store"), "hot", 2
    first = b"start"
    created = asyncio.run(FileStore(root, fsync=False).put(key, first, CREATE))
    context = multiprocessing.get_context("spawn")
    barrier, results, done = context.Barrier(1 + readers), context.Queue(), context.Event()
    counts = [context.Value("q", 0) for _ in range(readers)]
    writer = (file_workers.overwrite_key, (root, key, 200, 100, counts, barrier, done, results))
    targets = [writer] + [
        (file_workers.read_key, (root, key, count, barrier, done, results)) for count in counts
    ]
    outcomes = run_processes(targets, results)

    assert [error for _, _, error in outcomes] == [None] * (1 + readers)
    written = next(payload for role, payload, _ in outcomes if role == "writer")
    written[str(created.e_tag)] = file_workers.digest(first)
    seen = [read for role, payload, _ in outcomes if role == "reader" for read in payload]
    assert len(written) >= 201 and len(seen) >= readers * 100
    assert all(complete for _, _, complete in seen)
    assert all(written.get(e_tag) == body_sha256 for e_tag, body_sha256, _ in seen)
    assert len({e_tag for e_tag, _, _ in seen}) > 1  # the reads did overlap the writes
