"""Reads of the authority's chains that survive a concurrent history prune (LA §4.4.2).

A chain walk (the outcome audit, an exact outcome lookup, the decision chain, the handoff pin)
can find a record gone when a history prune deleted it after the walk read its head: the walk
raises InventoryChanged. `read_head_retrying` runs the read again on a freshly published head,
whose floor then excludes the pruned record, at most READ_ATTEMPTS times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, TypeVar

from laminar_cluster.errors import InventoryChanged
from laminar_cluster.lease.records import LeaderAuthorityRecord

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

T = TypeVar("T")

READ_ATTEMPTS: Final = 3  # LA §4.4.2: reads retry a record vanishing mid-walk (InventoryChanged)


async def read_head_retrying(
    authority: LeaderLeaseStore, read: Callable[[LeaderAuthorityRecord | None], Awaitable[T]]
) -> T:
    """`read(published head)`, run again on a fresh head while a record it walks vanished under a
    concurrent prune (InventoryChanged), at most READ_ATTEMPTS times; the last attempt's
    InventoryChanged is raised."""
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            await authority.clock.sleep(0)
        head = await authority.load_record()
        try:
            return await read(head)
        except InventoryChanged:
            if attempt + 1 == READ_ATTEMPTS:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
