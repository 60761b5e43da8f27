"""Process workers for the file store's several-process tests (test_file_processes.py):
module-level, so `spawn` can pickle them by reference."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from laminar_cluster.errors import ObjectAlreadyExists
from laminar_cluster.store.api import CREATE, OVERWRITE
from laminar_cluster.store.file_backend import FileStore

READ_ROUNDS_MAX = 100_000  # per reader: a bound on its loop, far above what a run needs
WRITES_MAX = 20_000  # the writer's bound


async def _create_all(root: str, keys: list[str], barrier: Any) -> tuple[list[str], int]:
    store = FileStore(root, fsync=False)
    won: list[str] = []
    refused = 0
    for key in keys:
        barrier.wait(timeout=120)  # every process starts this key's create at the same moment
        try:
            await store.put(key, body_of_creator(key, os.getpid()), CREATE)
        except ObjectAlreadyExists:
            refused += 1
            continue
        won.append(key)
    return won, refused


def body_of_creator(key: str, pid: int) -> bytes:
    """What process `pid` writes when it creates `key`."""
    return f"{key} created by {pid}".encode()


def create_keys(root: str, keys: list[str], barrier: Any, results: Any) -> None:
    """Process entry point: create each of `keys` once, all workers together key by key; report
    (pid, keys won, creates refused with ObjectAlreadyExists, error)."""
    try:
        won, refused = asyncio.run(_create_all(root, keys, barrier))
    except BaseException as error:
        results.put((os.getpid(), [], 0, repr(error)))
        raise
    results.put((os.getpid(), won, refused, None))


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


async def _overwrite(
    root: str, key: str, writes_min: int, reads_min: int, reads: Any, done: Any
) -> dict[str, str]:
    store = FileStore(root, fsync=False)
    written: dict[str, str] = {}
    for index in range(WRITES_MAX):
        body = b"%d:" % index + b"x" * (index * 37 % 5000)
        written[str((await store.put(key, body, OVERWRITE)).e_tag)] = digest(body)
        if index + 1 >= writes_min and all(count.value >= reads_min for count in reads):
            break
    done.set()
    return written


def overwrite_key(
    root: str,
    key: str,
    writes_min: int,
    reads_min: int,
    reads: Any,
    barrier: Any,
    done: Any,
    results: Any,
) -> None:
    """Process entry point: overwrite `key` with distinct bodies (at least `writes_min` times, and
    until every reader has read `reads_min` times); report ("writer", {e_tag: sha256}, error)."""
    try:
        barrier.wait(timeout=120)
        written = asyncio.run(_overwrite(root, key, writes_min, reads_min, reads, done))
    except BaseException as error:
        done.set()
        results.put(("writer", {}, repr(error)))
        raise
    results.put(("writer", written, None))


async def _read_until(root: str, key: str, count: Any, done: Any) -> list[tuple[str, str, bool]]:
    store = FileStore(root, fsync=False)
    seen: list[tuple[str, str, bool]] = []
    for _ in range(READ_ROUNDS_MAX):
        got = await store.get(key)
        seen.append((str(got.meta.e_tag), digest(got.body), got.complete))
        count.value += 1
        if done.is_set():
            break
    return seen


def read_key(root: str, key: str, count: Any, barrier: Any, done: Any, results: Any) -> None:
    """Process entry point: read `key` until the writer is done; report ("reader", [(e_tag,
    sha256 of the body, complete)], error)."""
    try:
        barrier.wait(timeout=120)
        seen = asyncio.run(_read_until(root, key, count, done))
    except BaseException as error:
        results.put(("reader", [], repr(error)))
        raise
    results.put(("reader", seen, None))
