"""Finding a node's acked attempts by listing (docs/protocols/distributed-checkpoint.md,
participant step P0; DC-9).

A restarted participant lists the attempt keys once, from the highest committed attempt on
(`before_attempt`: ids are zero-padded, so listing order is numeric order), and keeps the newest
attempt holding a manifest at its node's path. Retention leaves few attempts above the newest
Commit, so this is one listing page in practice (at most `SCAN_PAGES_MAX` pages of
`SCAN_PAGE_KEYS`). Steady participants never list: they poll the pointer (`pointer.py`).
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX, before_attempt, parse_manifest_path
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.store import ObjectStore

SCAN_PAGE_KEYS: Final = 1_000
SCAN_PAGES_MAX: Final = 4_096  # the listing's bound


async def newest_acked_attempt(store: ObjectStore, node_id: int, start: int | None) -> int | None:
    """The newest attempt at or above `start` (None: from the first) holding a manifest of
    `node_id`, or None."""
    offset = None if start is None else before_attempt(start)
    ours = None
    for _ in range(SCAN_PAGES_MAX):
        page = await store.list(ATTEMPTS_PREFIX, offset=offset, limit=SCAN_PAGE_KEYS)
        for meta in page:
            try:
                checkpoint_id, owner = parse_manifest_path(meta.key)
            except CorruptRecord:
                continue  # any other object of an attempt, or a foreign key
            if owner == node_id:
                ours = checkpoint_id if ours is None else max(ours, checkpoint_id)
        if len(page) < SCAN_PAGE_KEYS:
            break
        offset = page[-1].key
    return ours
