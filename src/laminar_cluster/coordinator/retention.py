"""Bounded retention of attempt objects, run by the leader after a Commit
(docs/protocols/distributed-checkpoint.md, "Retention", DC-13).

Restores only ever read the partials of the latest committed attempt (handoff) or of the
assignment handoff pin's checkpoint (recovery, RB §2.9), and the committed-output
reader only a committed attempt's marker, outputs and manifests. So for every attempt older
than the newest committed one:

* committed (a live Commit, a `committed.json` marker, or below the authority's artifact floor
  where the authority can no longer tell): its `prepare.json` and vnode partials are deleted;
  its marker, outputs and manifests are the sink's data and are kept;
* otherwise it can never commit (a newer outcome exists: outcomes strictly increase, and every
  Commit at or above the artifact floor is live): every object is deleted, manifests and
  outputs first, so that no manifest is ever left without its prepare;
* the pinned checkpoint's attempt is never touched: the walk stops there until the pin is
  consumed (a Commit under the pin's target, which is also newer than it).

One `AttemptRetention` walks the attempt keys once, in listing order, from an in-memory cursor
(a new leader starts again from the first attempt): at most `LIST_PAGES_MAX` listings of
`LIST_PAGE_KEYS` keys and `max_deletes` deletes per step. Keys that are not canonical attempt
objects are never deleted. A delete or listing failure leaves the cursor where it was (the next
step retries); objects a late writer re-creates below the cursor stay until the next leader.

`walked_below` is the checkpoint ID below which this walk has handled every attempt (its
deletes done): the artifact floor never passes it (DC-14), so no attempt leaves the authority's
live list before the walk has told whether it committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome_inventory
from laminar_cluster.authority.handoff_pins import assignment_handoff_pin
from laminar_cluster.coordinator.objects import gather_bounded
from laminar_cluster.coordinator.paths import (
    ATTEMPTS_PREFIX,
    AttemptObject,
    parse_attempt_object,
)
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import ObjectStore

LIST_PAGE_KEYS: Final = 1_000
LIST_PAGES_MAX: Final = 16
DELETES_PER_STEP_MIN: Final = 1_024

PinnedCheckpoint = Callable[[], Awaitable[int | None]]
"""The checkpoint ID of the active assignment handoff pin, or None."""

_SINK_DATA: Final = (AttemptObject.OUTPUT, AttemptObject.MANIFEST)


@dataclass(frozen=True, slots=True)
class RetentionStep:
    deleted: int
    listed: int  # keys examined
    caught_up: bool  # the walk reached the newest committed attempt (or the pinned one)


def deletes_per_step(vnode_count: int, participants: int) -> int:
    """Twice what one attempt can hold (so the backlog shrinks), at least
    `DELETES_PER_STEP_MIN`."""
    return max(DELETES_PER_STEP_MIN, 2 * (vnode_count + 2 * participants + 2))


class AttemptRetention:
    """The leader's retention walk over `checkpoints/attempt=` (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        authority: LeaderLeaseStore,
        *,
        pinned: PinnedCheckpoint | None = None,
    ) -> None:
        self.store = store
        self.authority = authority
        self.pinned = pinned if pinned is not None else self._handoff_pin_checkpoint
        self.deleted = 0  # over this instance's life
        self._cursor: str | None = None  # the last key handled: listing resumes after it
        self._marked: int | None = None  # the attempt whose marker the walk saw last
        self.walked_below = 0  # every attempt below this ID is handled (module docstring)

    async def step(self, newest_committed: int, *, max_deletes: int) -> RetentionStep:
        """Delete what attempts below `newest_committed` no longer need, within the bounds."""
        inventory = await cluster_outcome_inventory(self.authority)
        committed = {o.checkpoint_id for o in inventory.outcomes if o.is_commit()}
        artifact_before = inventory.retention_boundary.artifact_before_epoch
        pinned = await self.pinned()
        deleted = listed = 0
        for _ in range(LIST_PAGES_MAX):
            page = await self.store.list(ATTEMPTS_PREFIX, offset=self._cursor, limit=LIST_PAGE_KEYS)
            sink_data: list[str] = []  # outputs and manifests: deleted first
            others: list[str] = []
            handled = self._cursor
            caught_up = len(page) < LIST_PAGE_KEYS  # the end of the listing
            budget_left, stopped = True, False  # stopped: at the newest Commit or the pin
            reached = self.walked_below  # every attempt below it is handled once deletes are done
            for meta in page:
                try:
                    checkpoint_id, kind = parse_attempt_object(meta.key)
                except CorruptRecord:  # foreign: never trusted, never deleted
                    handled = meta.key
                    continue
                if checkpoint_id >= newest_committed or checkpoint_id == pinned:
                    caught_up = stopped = True
                    reached = max(reached, checkpoint_id)
                    break
                if deleted + len(sink_data) + len(others) >= max_deletes:
                    budget_left = False
                    break
                reached = max(reached, checkpoint_id)  # the keys of lower attempts are handled
                listed += 1
                handled = meta.key
                if kind is AttemptObject.SINK_COMMIT:
                    self._marked = checkpoint_id
                elif kind in _SINK_DATA:
                    kept = (
                        checkpoint_id in committed
                        or checkpoint_id < artifact_before
                        or checkpoint_id == self._marked
                    )
                    if not kept:
                        sink_data.append(meta.key)
                else:
                    others.append(meta.key)
            await self._delete(sink_data)
            await self._delete(others)
            deleted += len(sink_data) + len(others)
            self._cursor = handled
            if caught_up and budget_left and not stopped:  # the listing ended: none is left below
                reached = max(reached, newest_committed)
            self.walked_below = reached
            if not budget_left:
                return RetentionStep(deleted, listed, caught_up=False)
            if caught_up:
                return RetentionStep(deleted, listed, caught_up=True)
        return RetentionStep(deleted, listed, caught_up=False)

    async def _delete(self, keys: list[str]) -> None:
        store = self.store

        def deleter(key: str) -> Callable[[], Awaitable[None]]:
            return lambda: store.delete(key)

        await gather_bounded([deleter(key) for key in keys])
        self.deleted += len(keys)

    async def _handoff_pin_checkpoint(self) -> int | None:
        pin = await assignment_handoff_pin(self.authority)
        if pin is None or pin.checkpoint is None:  # no pin, or the initial state: nothing held
            return None
        return pin.checkpoint.checkpoint_id
