"""Leader attempts with nothing new to look at are skipped (RB §4.2, RB §4.3; issue 15).

While this process leads, the controller loop runs `rebalance_attempt` at every audit tick.
An attempt that found nothing to do (`try_rebalance` marks it: no live or admitted successor,
or a plan equal to the head; not an attempt that deferred, waiting for reports or a drain) is a
function of what it read; `IdleAttempts` remembers what that was, as a key read cheaply, and
the next tick skips the attempt while the key is unchanged:

* the leader proof the attempt runs under;
* the assignment head (the snapshot store's watched head: one conditional read of its hint);
* the authority's carried state (the observed head record: one conditional read of the
  pointer, the record only when it moved; this process's own renewals do not change it),
  with the outcome chains only under a recovery head, the one kind whose attempt reads them
  (its recovery checkpoint and pin);
* the live nodes it was given, the local registry, the engine state, recovery mode, the
  membership watch version and the unresponsive quarantine, all in memory.

Every `IDLE_REATTEMPT_TICKS`-th tick the attempt runs whatever the key says, which bounds how
long an input the key misses (a member lease's owner changing without a membership change,
say) goes unseen. A key that cannot be read runs the attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.records import AssignmentSnapshot, HeadState
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.context import RebalanceContext

# An idle attempt is skipped at most this many ticks in a row.
IDLE_REATTEMPT_TICKS: Final = 30


@dataclass(frozen=True, slots=True)
class IdleKey:
    """What an attempt that found nothing to do depended on (module docstring)."""

    proof: LeaderProof
    head: AssignmentSnapshot | None
    authority: tuple[object, ...]
    local: tuple[object, ...]


def carried_state(record: LeaderAuthorityRecord | None, *, outcomes: bool) -> tuple[object, ...]:
    """The fields a record carries forward (LA §3.4), the outcome chains only if `outcomes`."""
    if record is None:
        return ()
    state: tuple[object, ...] = (
        record.assignment_decision_head,
        record.assignment_decision_floor,
        record.recovery_fault_revision,
        record.recovery_fault_slots,
        record.recovery_release_head,
    )
    if outcomes:
        state += (record.outcome_head, record.commit_head, record.outcome_floor)
    return state


class IdleAttempts:
    """The key of the last attempt that found nothing to do, and the ticks skipped since."""

    def __init__(self) -> None:
        self._idle: IdleKey | None = None
        self._skipped = 0

    async def key(
        self,
        ctx: RebalanceContext,
        controller: StoreClusterController,
        proof: LeaderProof,
        live: Sequence[int],
    ) -> IdleKey:
        """The key of an attempt on `live` now: the local state first (in memory, before any
        await), then two conditional reads (the head hint, the authority pointer)."""
        registry = ctx.engine.registry()
        local = (
            tuple(live),
            registry.version,
            registry.owners,
            ctx.engine.state(),
            controller.is_recovering(),
            controller.members_watch().version(),
            controller.quarantined(),
        )
        head = await ctx.snapshots.load_watched()
        recovery = head is not None and ctx.snapshots.watched_state(head) in (
            HeadState.MATERIALIZED,
            None,
        )
        record = await ctx.authority.observe_record()
        return IdleKey(proof, head, carried_state(record, outcomes=recovery), local)

    def skip(self, key: IdleKey) -> bool:
        """Whether an attempt under `key` can be skipped (and count it as skipped)."""
        if key != self._idle or self._skipped >= IDLE_REATTEMPT_TICKS:
            self._skipped = 0
            return False
        self._skipped += 1
        return True

    def settled(self, key: IdleKey | None, result: int | None) -> None:
        """After an attempt under `key` returned `result` (not called when it raised)."""
        self._idle = key if result is None else None

    def forget(self) -> None:
        """An attempt failed: the next one runs."""
        self._idle = None
