"""Bounded retention of attempt objects, run by the leader after a Commit
(docs/protocols/distributed-checkpoint.md, "Retention", DC-13).

Restores only ever read the slices of the latest committed attempt (handoff) or of the
assignment handoff pin's checkpoint (recovery, RB §2.9), and a slice may be a
reference to an earlier committed attempt's state object (DC-16); the committed-output reader
only reads a committed attempt's marker and manifests. So for every attempt older than the
newest committed one:

* committed (a live Commit, a `committed.json` marker, or below the authority's artifact floor
  where the authority can no longer tell): its `prepare.json` and its state objects are
  deleted, except a state object that the newest Commit's slices or the pin's name (`keep`,
  and the pin's holders); its marker and manifests are the sink's data and are kept;
* otherwise it can never commit (a newer outcome exists: outcomes strictly increase, and every
  Commit at or above the artifact floor is live): every object is deleted, manifests first
  (their own batch), so that no manifest is ever left without its prepare;
* the pinned checkpoint's attempt is never touched: the walk stops there until the pin is
  consumed (a Commit under the pin's target, which is also newer than it).

One `AttemptRetention` walks the attempt keys once, in listing order, from an in-memory cursor
(a new leader starts again from the first attempt): at most `LIST_PAGES_MAX` listings of
`LIST_PAGE_KEYS` keys and `max_deletes` deletes per step, sent as multi-object deletes
(`delete_many`: one request per 1,000 keys). A state object the walk passes while it is still
referenced is remembered (`held`) and deleted by a later step once no kept slice names it.
Keys that are not canonical attempt objects are never deleted. A delete or listing failure
leaves the cursor where it was (the next step retries); objects a late writer re-creates below
the cursor stay until the next leader.

`walked_below` is the checkpoint ID below which this walk has handled every attempt (its
deletes done): the artifact floor never passes it (DC-14), so no attempt leaves the authority's
live list before the walk has told whether it committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_outcome,
    cluster_outcome_inventory,
)
from laminar_cluster.authority.handoff_pins import assignment_handoff_pin
from laminar_cluster.coordinator.paths import (
    ATTEMPTS_PREFIX,
    AttemptObject,
    parse_attempt_object,
)
from laminar_cluster.coordinator.restore import committed_slices
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import ObjectStore

LIST_PAGE_KEYS: Final = 1_000
LIST_PAGES_MAX: Final = 16
DELETES_PER_STEP_MIN: Final = 1_024

PinnedCheckpoint = Callable[[], Awaitable[int | None]]
"""The checkpoint ID of the active assignment handoff pin, or None."""


@dataclass(frozen=True, slots=True)
class RetentionStep:
    deleted: int
    listed: int  # keys examined
    caught_up: bool  # the walk reached the newest committed attempt (or the pinned one)


@dataclass
class _Batch:
    """What one page of the walk deletes: manifests first (their own batch), then the rest."""

    sink_data: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sink_data) + len(self.others)


def deletes_per_step(participants: int) -> int:
    """Twice what one attempt can hold (a prepare, a marker, a state object and a manifest per
    participant: so the backlog shrinks), at least `DELETES_PER_STEP_MIN`."""
    return max(DELETES_PER_STEP_MIN, 2 * (2 * participants + 2))


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
        self.held: set[str] = set()  # state objects passed while still referenced
        self._cursor: str | None = None  # the last key handled: listing resumes after it
        self._marked: int | None = None  # the attempt whose marker the walk saw last
        self._pin_holders: tuple[int, frozenset[str]] | None = None  # the pin's, read once
        self.walked_below = 0  # every attempt below this ID is handled (module docstring)

    async def step(
        self, newest_committed: int, keep: frozenset[str] = frozenset(), *, max_deletes: int
    ) -> RetentionStep:
        """Delete what attempts below `newest_committed` no longer need, within the bounds;
        `keep`: the state objects the newest Commit's slices name."""
        inventory = await cluster_outcome_inventory(self.authority)
        committed = {o.checkpoint_id for o in inventory.outcomes if o.is_commit()}
        artifact_before = inventory.retention_boundary.artifact_before_epoch
        pinned = await self.pinned()
        keep = keep | await self._pinned_holders(pinned)
        released = sorted(self.held - keep)[:max_deletes]
        await self._delete(released)
        self.held.difference_update(released)
        deleted, listed = len(released), 0
        for _ in range(LIST_PAGES_MAX):
            page = await self.store.list(ATTEMPTS_PREFIX, offset=self._cursor, limit=LIST_PAGE_KEYS)
            batch = _Batch()
            held: set[str] = set()
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
                if deleted + len(batch) >= max_deletes:
                    budget_left = False
                    break
                reached = max(reached, checkpoint_id)  # the keys of lower attempts are handled
                listed += 1
                handled = meta.key
                committed_attempt = checkpoint_id in committed or checkpoint_id < artifact_before
                self._place(meta.key, checkpoint_id, kind, committed_attempt, keep, batch, held)
            await self._delete(batch.sink_data)
            await self._delete(batch.others)
            self.held.update(held)
            deleted += len(batch)
            self._cursor = handled
            if caught_up and budget_left and not stopped:  # the listing ended: none is left below
                reached = max(reached, newest_committed)
            self.walked_below = reached
            if not budget_left:
                return RetentionStep(deleted, listed, caught_up=False)
            if caught_up:
                return RetentionStep(deleted, listed, caught_up=True)
        return RetentionStep(deleted, listed, caught_up=False)

    def _place(
        self,
        key: str,
        checkpoint_id: int,
        kind: AttemptObject,
        committed: bool,
        keep: frozenset[str],
        batch: _Batch,
        held: set[str],
    ) -> None:
        """Where one key of an attempt below the newest Commit goes: a marker is kept (and
        marks its attempt committed), a committed attempt's manifest is kept, a state object a
        kept cut names is held (DC-16); anything else is deleted, manifests first."""
        if kind is AttemptObject.SINK_COMMIT:
            self._marked = checkpoint_id
        elif kind is AttemptObject.MANIFEST:
            if not (committed or checkpoint_id == self._marked):
                batch.sink_data.append(key)
        elif key in keep:
            held.add(key)
        else:
            batch.others.append(key)

    async def _delete(self, keys: list[str]) -> None:
        """One multi-object delete per 1,000 keys (none for no key)."""
        if keys:
            await self.store.delete_many(keys)
            self.deleted += len(keys)

    async def _pinned_holders(self, pinned: int | None) -> frozenset[str]:
        """The state objects the pinned checkpoint's slices name (read once per pin)."""
        if pinned is None:
            return frozenset()
        known = self._pin_holders
        if known is None or known[0] != pinned:
            outcome = await cluster_outcome(self.authority, pinned)
            if outcome is None or not outcome.is_commit() or outcome.recovery_capsule is None:
                raise CorruptRecord(f"the handoff pin's checkpoint {pinned} has no live Commit")
            decisions = self.authority.require_decisions()
            cut = await committed_slices(self.store, decisions, outcome.recovery_capsule)
            known = self._pin_holders = (pinned, cut.holders())
        return known[1]

    async def _handoff_pin_checkpoint(self) -> int | None:
        pin = await assignment_handoff_pin(self.authority)
        if pin is None or pin.checkpoint is None:  # no pin, or the initial state: nothing held
            return None
        return pin.checkpoint.checkpoint_id
