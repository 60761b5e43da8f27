"""Process workers that open their store from a URL (any backend), for spawn-started tests."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from laminar_cluster.errors import PreconditionFailed
from laminar_cluster.store import open_store


def counter_body(value: int) -> bytes:
    """A counter body with a nonce: S3 e_tags are content hashes, so equal bytes would be ABA."""
    return json.dumps({"value": value, "nonce": uuid.uuid4().hex}).encode()


async def _increments(url: str, key: str, increments: int, attempts_max: int) -> list[int]:
    store = open_store(url)
    written: list[int] = []
    attempts = 0
    while len(written) < increments:
        attempts += 1
        if attempts > attempts_max:
            raise RuntimeError(f"{key}: {len(written)}/{increments} after {attempts_max} attempts")
        current = await store.get(key)
        value = json.loads(current.body)["value"] + 1
        try:
            await store.put(key, counter_body(value), current.meta.token)
        except PreconditionFailed:
            continue
        written.append(value)
    return written


def increment_from_url(
    url: str, key: str, increments: int, attempts_max: int, barrier: Any, results: Any
) -> None:
    """Process entry point: wait for every worker, then increment; report (values, error)."""
    try:
        barrier.wait(timeout=120)
        results.put((asyncio.run(_increments(url, key, increments, attempts_max)), None))
    except BaseException as error:
        results.put(([], repr(error)))
        raise
