"""Finding attempts by listing (docs/protocols/distributed-checkpoint.md, participant step P1).

Attempt IDs only grow and every attempt's keys share one zero-padded prefix, so one listing of
`checkpoints/attempt=` after `after_attempt(id)` with limit 1 returns the first key of the next
attempt (or nothing): each request skips a whole attempt, however many partials it holds. A
participant keeps the last attempt it saw as its cursor, so a poll with nothing new costs one
listing request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from laminar_cluster.coordinator.paths import (
    ATTEMPTS_PREFIX,
    after_attempt,
    before_attempt,
    parse_attempt_key,
)
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.store import ObjectStore


async def attempts_after(
    store: ObjectStore, cursor: int | None, *, limit: int, inclusive: bool = False
) -> AsyncIterator[int]:
    """Attempt IDs above `cursor` (or from `cursor` when `inclusive`), ascending, at most
    `limit` of them (one listing request each, plus one that finds the end)."""
    offset = None
    if cursor is not None:
        offset = before_attempt(cursor) if inclusive else after_attempt(cursor)
    for _ in range(limit):
        listed = await store.list(ATTEMPTS_PREFIX, offset=offset, limit=1)
        if not listed:
            return
        key = listed[0].key
        try:
            checkpoint_id = parse_attempt_key(key)
        except CorruptRecord:
            # A foreign key under the prefix: skip past it, never trust it.
            offset = key
            continue
        yield checkpoint_id
        offset = after_attempt(checkpoint_id)


async def newest_attempt(store: ObjectStore, cursor: int | None, *, limit: int) -> int | None:
    """The newest attempt above `cursor` within `limit` jumps (None: nothing newer)."""
    newest = None
    async for checkpoint_id in attempts_after(store, cursor, limit=limit):
        newest = checkpoint_id
    return newest
