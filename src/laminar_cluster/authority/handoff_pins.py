"""The leader authority's assignment handoff pin (RB §2.9, RB §4.9 step 9, RB §4.16).

The authority holds at most one pin `{target fence, checkpoint}`: the committed cluster
checkpoint the assignment `target` must restore from. It is not a stored field: it is derived
from one authority head, from its durable assignment-decision chain (`assignment_chain`) and its
audited cluster outcomes (`outcome_audit`), so it changes exactly when a decision or an outcome
is admitted, and every reader of one head derives the same pin.

The rule:

* Let D be the admitted assignment decision with the highest target version: the head of the
  live decision chain, else the decision floor's anchor. Without one there is no pin.
* The candidate pin P(D):
  * drain Commit: `(D.transition.target, D.handoff_checkpoint)`;
  * recovery: `(D.target, D.recovery_checkpoint)`; a recovery to the initial state (LA-20)
    pins `(D.target, None)`: no Commit exists yet, and any Commit under the target consumes it;
  * drain Abort: the target is the rollback fence R(D) (version D.target_version; vnode count,
    assignment digest and participants of D.transition.predecessor: the predecessor map
    re-labelled, as the Abort materialization publishes it); the checkpoint is the restore cut of
    the predecessor fence: the recovery capsule of the highest committed cluster outcome whose
    assignment_fence == predecessor; else P(D') if that exists and P(D').target == predecessor,
    D' being the decision just below D on the chain (the pin derived from decisions strictly
    before D); else there is no candidate. In that fallback no Commit under the predecessor
    exists, so P(D') cannot have been consumed (below): the candidate is the pin.
* The candidate is consumed (no active pin) when a committed cluster outcome exists whose
  assignment_fence == P.target and whose epoch > P.checkpoint.epoch.

So a recovery decision D(n+1) recorded while D(n)'s pin is unconsumed moves the pin to
target(n+1) (propagation): D(n+1) is now the highest decision and names its own recovery
checkpoint (the same cut, RB §4.9 step 9).

Consequences enforced elsewhere: `cluster_outcomes.record_cluster_outcome` refuses a Commit
whose fence is not the active pin's target (Aborts are never refused by the pin), and
`cluster_outcome_floors.prune_cluster_outcomes_before` refuses an artifact floor above the
active pin's checkpoint, so `cluster_outcome(pin.checkpoint.epoch)` and
`cluster_outcome_with_recovery_capsule` keep answering for it (a pin on the initial state holds
no checkpoint and so no floor); and `decision_floor.prune_assignment_drain_decisions_before`
keeps the decision floor at or below `handoff_pin_base_version` + 1, so the decision a run of
Aborts inherits its pin from is never compacted away (LA-19).

Reads: the decision chain is walked lazily, newest first: the newest decision, and for an
Abort without a restore cut the chain of Aborts just below it (stopping at the first version
gap); the outcome audit is the cached one of the same head. Errors are those of the chain and
outcome audits (CorruptRecord, InventoryChanged retried by the public reads, Refused past the
live-link bound).
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from laminar_cluster.authority.assignment_chain import live_decisions_newest_first
from laminar_cluster.authority.outcome_audit import cached_audit
from laminar_cluster.authority.reread import read_head_retrying
from laminar_cluster.checkpoint.records import CheckpointOutcome, RecoveryCapsuleRef
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentVerdict,
    AuthorityAssignmentDecision,
    LeaderAuthorityRecord,
)

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

__all__ = [
    "HandoffPin",
    "assignment_handoff_checkpoint",
    "assignment_handoff_pin",
    "assignment_handoff_pin_on",
    "handoff_pin_at",
    "handoff_pin_base_version",
    "rollback_fence",
]


@dataclass(frozen=True, slots=True)
class HandoffPin:
    """The active assignment handoff pin: `target` must restore from `checkpoint`; None is the
    initial state of a recovery decided before any cluster checkpoint committed (LA-20)."""

    target: CheckpointAssignmentFence
    checkpoint: RecoveryCapsuleRef | None

    @property
    def checkpoint_epoch(self) -> int:
        """The pinned cut's epoch; 0 for the initial state (every epoch is after it)."""
        return 0 if self.checkpoint is None else self.checkpoint.epoch


def rollback_fence(decision: AssignmentDrainDecision) -> CheckpointAssignmentFence:
    """The fence of an Abort's rollback generation: the predecessor's owner map and roster at
    the target version (RB §2.3 `aborted_target`)."""
    predecessor = decision.transition.predecessor
    return CheckpointAssignmentFence(
        assignment_version=decision.target_version,
        vnode_count=predecessor.vnode_count,
        assignment_digest=predecessor.assignment_digest,
        participants=predecessor.participants,
    )


async def assignment_handoff_pin(authority: LeaderLeaseStore) -> HandoffPin | None:
    """The active pin of the published head, or None (no decision, no candidate, or consumed)."""

    async def read(head: LeaderAuthorityRecord | None) -> HandoffPin | None:
        if head is None or not _has_decision(head):
            return None  # no decision: no pin, and no outcome audit needed
        outcomes = (await cached_audit(authority, head)).outcomes
        return await handoff_pin_at(authority, head, outcomes)

    return await read_head_retrying(authority, read)


async def assignment_handoff_checkpoint(
    authority: LeaderLeaseStore, fence: CheckpointAssignmentFence
) -> RecoveryCapsuleRef | None:
    """The active pin's checkpoint iff the pin's target is exactly `fence`
    (RB §2.9), else None. None also for a pin on the initial state: callers that must tell the two
    apart use `assignment_handoff_pin_on`."""
    pin = await assignment_handoff_pin_on(authority, fence)
    return None if pin is None else pin.checkpoint


async def assignment_handoff_pin_on(
    authority: LeaderLeaseStore, fence: CheckpointAssignmentFence
) -> HandoffPin | None:
    """The active pin iff its target is exactly `fence`, else None."""
    pin = await assignment_handoff_pin(authority)
    return pin if pin is not None and pin.target == fence else None


async def handoff_pin_at(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    outcomes: tuple[CheckpointOutcome, ...],
) -> HandoffPin | None:
    """The active pin of `head`, given `outcomes`: the audited cluster outcomes of the same
    head (ascending by epoch, anchors included). Mutators call this with the head their append
    is conditioned on, so the pin they enforce is the one in force when they write."""
    derived = await _active(authority, head, outcomes)
    return None if derived is None else derived.pin


async def handoff_pin_base_version(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    outcomes: tuple[CheckpointOutcome, ...],
) -> int | None:
    """The target version of the decision the active pin of `head` is derived from (the
    highest decision itself, or the decision below a run of Aborts without a restore cut);
    None without an active pin. The decision floor stays at or below it + 1, so that decision
    remains live or the floor's anchor and the pin stays derivable (LA-19)."""
    derived = await _active(authority, head, outcomes)
    return None if derived is None else derived.base_version


async def _active(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    outcomes: tuple[CheckpointOutcome, ...],
) -> _Derived | None:
    """The candidate of `head`, unless there is none or it is consumed."""
    derived = await _candidate(authority, head, outcomes)
    return None if derived is None or _consumed(derived.pin, outcomes) else derived


def _has_decision(head: LeaderAuthorityRecord) -> bool:
    floor = head.assignment_decision_floor
    return head.assignment_decision_head is not None or (
        floor is not None and floor.terminal_anchor is not None
    )


async def _candidate(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    outcomes: tuple[CheckpointOutcome, ...],
) -> _Derived | None:
    """P(D) for the highest decision D, iteratively: Aborts without a restore cut wait in
    `waiting` (newest first) for the pin of the decision just below them."""
    waiting: list[AssignmentDrainDecision] = []
    async with aclosing(live_decisions_newest_first(authority, head)) as live:
        async for _, decision in live:
            resolved = _resolve(decision, waiting, outcomes)
            if not isinstance(resolved, _Wait):
                return resolved
    floor = head.assignment_decision_floor
    anchor = None if floor is None else floor.terminal_anchor
    if anchor is not None:
        resolved = _resolve(anchor, waiting, outcomes)
        if not isinstance(resolved, _Wait):
            return resolved
    return None  # the chain ran out below the waiting Aborts (or had no decision)


@dataclass(frozen=True, slots=True)
class _Derived:
    """A candidate pin and the target version of the decision its checkpoint comes from."""

    pin: HandoffPin
    base_version: int


class _Wait:
    """The decision is an Abort without a restore cut: look one decision further down."""


_WAIT: Final = _Wait()


def _resolve(
    decision: AuthorityAssignmentDecision,
    waiting: list[AssignmentDrainDecision],
    outcomes: tuple[CheckpointOutcome, ...],
) -> _Derived | _Wait | None:
    """Step to `decision` (the next older one): the candidate of the highest decision once it
    is known, or _WAIT after recording `decision` as another waiting Abort."""
    if waiting and decision.target_version != waiting[-1].transition.predecessor.assignment_version:
        return None  # a version gap: no pin below can target the waiting Abort's predecessor
    pin = _direct(decision, outcomes)
    if pin is None:
        assert isinstance(decision, AssignmentDrainDecision)  # only an Abort lacks a direct pin
        waiting.append(decision)
        return _WAIT
    for abort in reversed(waiting):  # oldest first: each inherits the pin just below it
        if pin.target != abort.transition.predecessor:
            return None
        pin = HandoffPin(target=rollback_fence(abort), checkpoint=pin.checkpoint)
    return _Derived(pin=pin, base_version=decision.target_version)


def _direct(
    decision: AuthorityAssignmentDecision, outcomes: tuple[CheckpointOutcome, ...]
) -> HandoffPin | None:
    """P(decision) from the decision and the outcomes alone; None for an Abort whose
    predecessor fence has no committed cluster outcome (its cut comes from below)."""
    if not isinstance(decision, AssignmentDrainDecision):
        return HandoffPin(target=decision.target, checkpoint=decision.recovery_checkpoint)
    if decision.verdict is AssignmentVerdict.COMMIT:
        checkpoint = decision.handoff_checkpoint
        assert checkpoint is not None  # validated: a Commit carries its handoff checkpoint
        return HandoffPin(target=decision.transition.target, checkpoint=checkpoint)
    cut = _restore_cut(decision.transition.predecessor, outcomes)
    return None if cut is None else HandoffPin(target=rollback_fence(decision), checkpoint=cut)


def _restore_cut(
    fence: CheckpointAssignmentFence, outcomes: tuple[CheckpointOutcome, ...]
) -> RecoveryCapsuleRef | None:
    """The recovery capsule of the highest committed cluster outcome under `fence`."""
    for outcome in reversed(outcomes):
        if outcome.is_commit() and outcome.assignment_fence == fence:
            return outcome.recovery_capsule  # validated: a Commit names its capsule
    return None


def _consumed(pin: HandoffPin, outcomes: tuple[CheckpointOutcome, ...]) -> bool:
    """A complete cluster checkpoint committed under the pinned target after the pinned cut."""
    return any(
        outcome.is_commit()
        and outcome.assignment_fence == pin.target
        and outcome.epoch > pin.checkpoint_epoch
        for outcome in outcomes
    )
