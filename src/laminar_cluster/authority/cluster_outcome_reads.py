"""Cluster checkpoint outcome reads (LA §4.4.2, LA §4.4.4, LA §4.4.9; invariants
LA-13, LA-14, LA-11, LA-21).

Every read goes through the outcome audit (`outcome_audit`, LA §4.4.3):

* `cluster_outcome(epoch)`: an exact lookup. A cached audit of the head answers it; otherwise
  only the chain that can hold the epoch is walked (the Commit chain below the terminal floor,
  the terminal chain above it), link by link, down to the epoch or the floor's anchor.
* `cluster_outcome_with_recovery_capsule`, `cluster_outcome_inventory`, `cluster_outcomes`,
  `highest_cluster_committed_outcome`, `highest_cluster_terminal_outcome`,
  `cluster_attempt_settlement` (LA-14: anchors and strict dominators keep "is attempt X closed?"
  answerable after compaction), and the retention boundary, plain or audited.
* `validated_cluster_outcome_inventory` (LA §4.4.4): the inventory once the recovery cut passed its
  preflight with the heads unchanged around it (LA-14).
* `maintain_cluster_recovery_capsules` (LA §4.4.9): one bounded capsule sweep below the floor.

Lookups and audits retry a record vanishing mid-walk (InventoryChanged, a concurrent prune) up
to 3 times. Chain, deployment or capsule mismatches are CorruptRecord (LA-11).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laminar_cluster.authority import admission
from laminar_cluster.authority.cluster_outcome_floors import (
    ValidateArtifacts,
    preflight_recovery_cut,
    same_outcome_state,
)
from laminar_cluster.authority.outcome_audit import (
    audit_cache,
    audit_key,
    cached_audit,
    corrupt,
    ends_at_anchor,
    read_linked_outcome,
)
from laminar_cluster.authority.reread import read_head_retrying
from laminar_cluster.checkpoint.capsule import reference_path
from laminar_cluster.checkpoint.capsule_gc import RecoveryCapsuleGcStep
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    ClusterRecoveryCapsule,
)
from laminar_cluster.errors import CorruptRecord, Fenced, Refused
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.records import AuthorityOutcomeFloor, LeaderAuthorityRecord

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore


@dataclass(frozen=True, slots=True)
class ClusterOutcomeRetentionBoundary:
    """The outcome floor's horizons and anchors (all 0/None without a floor)."""

    artifact_before_epoch: int
    terminal_before_epoch: int
    committed_anchor: CheckpointOutcome | None
    terminal_anchor: CheckpointOutcome | None

    @classmethod
    def from_floor(cls, floor: AuthorityOutcomeFloor | None) -> ClusterOutcomeRetentionBoundary:
        if floor is None:
            return cls(0, 0, None, None)
        return cls(
            artifact_before_epoch=floor.artifact_before_epoch,
            terminal_before_epoch=floor.authority_before_epoch,
            committed_anchor=floor.committed_anchor,
            terminal_anchor=floor.terminal_anchor,
        )


@dataclass(frozen=True, slots=True)
class ClusterOutcomeInventory:
    """Outcomes at or above the artifact floor (ascending), with the boundary of the same head."""

    outcomes: tuple[CheckpointOutcome, ...]
    retention_boundary: ClusterOutcomeRetentionBoundary


def inventory_of(
    head: LeaderAuthorityRecord | None, outcomes: tuple[CheckpointOutcome, ...]
) -> ClusterOutcomeInventory:
    floor = None if head is None else head.outcome_floor
    artifact_before = 0 if floor is None else floor.artifact_before_epoch
    return ClusterOutcomeInventory(
        outcomes=tuple(outcome for outcome in outcomes if outcome.epoch >= artifact_before),
        retention_boundary=ClusterOutcomeRetentionBoundary.from_floor(floor),
    )


def at_epoch(outcomes: tuple[CheckpointOutcome, ...], epoch: int) -> CheckpointOutcome | None:
    index = bisect.bisect_left(outcomes, epoch, key=lambda outcome: outcome.epoch)
    return outcomes[index] if index < len(outcomes) and outcomes[index].epoch == epoch else None


async def cluster_outcome(authority: LeaderLeaseStore, epoch: int) -> CheckpointOutcome | None:
    """The live outcome of `epoch` (LA §4.4.2); None if unresolved or compacted, never abort."""

    async def read(head: LeaderAuthorityRecord | None) -> CheckpointOutcome | None:
        return None if head is None else await _outcome_at(authority, head, epoch)

    return await read_head_retrying(authority, read)


async def _outcome_at(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord, epoch: int
) -> CheckpointOutcome | None:
    """LA §4.4.2 steps 1-3 against one head; step 4 walks a chain."""
    floor = head.outcome_floor
    if floor is not None and epoch < floor.artifact_before_epoch:
        return None
    terminal_before = 0 if floor is None else floor.authority_before_epoch
    hit = audit_cache(authority).lookup(audit_key(head), head.lease.seq)
    if hit is not None:
        found = at_epoch(hit.outcomes, epoch)
        if found is not None and (
            found.epoch >= terminal_before
            or found.is_commit()
            or (floor is not None and floor.terminal_anchor == found)
        ):
            return found
        return None
    anchor = None if floor is None else floor.terminal_anchor
    if anchor is not None and anchor.epoch == epoch:
        await _check_deployment(authority, head, anchor)
        return anchor
    return await _walk_to(authority, head, epoch, commit_only=epoch < terminal_before)


async def _walk_to(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord, epoch: int, *, commit_only: bool
) -> CheckpointOutcome | None:
    """LA §4.4.2 steps 4-6: walk the Commit chain (below the terminal floor) or the terminal
    chain down to `epoch`, checking every link; a cold lookup reads only that chain."""
    floor, what = head.outcome_floor, "Commit" if commit_only else "outcome"
    before, anchor_link, anchor = 0, None, None
    if floor is not None and commit_only:
        before, anchor_link, anchor = (
            floor.artifact_before_epoch,
            floor.committed_anchor_link,
            floor.committed_anchor,
        )
    elif floor is not None:
        before, anchor_link, anchor = (
            floor.authority_before_epoch,
            floor.terminal_anchor_link,
            floor.terminal_anchor,
        )
    records = {head.lease.seq: head}
    link = head.commit_head if commit_only else head.outcome_head
    traversed = 0
    while True:
        if link is None:
            if anchor_link is not None:
                raise corrupt(head.lease.seq, f"cluster {what} chain stopped without its anchor")
            return None
        if link.epoch < before:
            if (anchor_link is None and anchor is None) or ends_at_anchor(
                link, anchor_link, anchor
            ):
                return None
            raise corrupt(
                head.lease.seq,
                f"cluster {what} chain does not meet durable floor {before} at its exact anchor",
            )
        if link.epoch < epoch:
            return None  # walked past it
        if traversed == MAX_LIVE_AUTHORITY_LINKS:  # LA-21: bounded work per lookup
            raise corrupt(
                head.lease.seq,
                f"live {what} retention exceeds the fixed {MAX_LIVE_AUTHORITY_LINKS}-link "
                "authority bound during exact lookup",
            )
        traversed += 1
        record, outcome = await read_linked_outcome(
            authority, records, link, commit_chain=commit_only
        )
        if outcome.epoch == epoch:
            await _check_deployment(authority, head, outcome)
            return outcome
        link = record.previous_commit if commit_only else record.previous_outcome


async def _check_deployment(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord, outcome: CheckpointOutcome
) -> None:
    deployment_id = await authority.require_decisions().load_or_create_deployment_id()
    floor = head.outcome_floor
    if outcome.deployment_id != deployment_id or (
        floor is not None and floor.deployment_id != deployment_id
    ):
        raise corrupt(
            head.lease.seq,
            f"cluster outcome epoch {outcome.epoch} does not belong to current deployment "
            f"{deployment_id}",
        )


async def cluster_outcome_with_recovery_capsule(
    authority: LeaderLeaseStore, epoch: int
) -> tuple[CheckpointOutcome, ClusterRecoveryCapsule | None] | None:
    """The live outcome of `epoch` with its verified capsule (None for an Abort)."""
    outcome = await cluster_outcome(authority, epoch)
    if outcome is None or not outcome.is_commit():
        return None if outcome is None else (outcome, None)
    where = f"cluster Commit epoch {outcome.epoch} checkpoint {outcome.checkpoint_id}"
    ref = outcome.recovery_capsule
    if ref is None:  # never passes record validation; checked again on principle
        raise CorruptRecord(f"{where} has no recovery capsule")
    capsule = await authority.require_decisions().load_recovery_capsule(ref)
    if (
        (capsule.attempt.epoch, capsule.attempt.checkpoint_id)
        != (outcome.epoch, outcome.checkpoint_id)
        or capsule.assignment_fence != outcome.assignment_fence
        or capsule.deployment_id != outcome.deployment_id
    ):
        path = reference_path(ref)
        raise CorruptRecord(f"{path}: {where} does not match its recovery capsule", key=path)
    return outcome, capsule


async def _audited(
    authority: LeaderLeaseStore,
) -> tuple[LeaderAuthorityRecord | None, tuple[CheckpointOutcome, ...]]:
    """The head and its full audited outcome list (anchors included); 3 tries (LA §4.4.2)."""

    async def read(
        head: LeaderAuthorityRecord | None,
    ) -> tuple[LeaderAuthorityRecord | None, tuple[CheckpointOutcome, ...]]:
        if head is None:
            audit_cache(authority).clear()
            return None, ()
        return head, (await cached_audit(authority, head)).outcomes

    return await read_head_retrying(authority, read)


async def cluster_outcome_inventory(authority: LeaderLeaseStore) -> ClusterOutcomeInventory:
    """Audited outcomes at or above the artifact floor, with that head's boundary."""
    head, outcomes = await _audited(authority)
    return inventory_of(head, outcomes)


async def cluster_outcomes(authority: LeaderLeaseStore) -> tuple[CheckpointOutcome, ...]:
    return (await cluster_outcome_inventory(authority)).outcomes


async def highest_cluster_committed_outcome(
    authority: LeaderLeaseStore,
) -> CheckpointOutcome | None:
    """The greatest live Commit: the recovery cut."""
    commits = [o for o in await cluster_outcomes(authority) if o.is_commit()]
    return commits[-1] if commits else None


async def highest_cluster_terminal_outcome(
    authority: LeaderLeaseStore,
) -> CheckpointOutcome | None:
    """The greatest audited outcome, compacted anchors included."""
    outcomes = (await _audited(authority))[1]
    return outcomes[-1] if outcomes else None


async def cluster_attempt_settlement(
    authority: LeaderLeaseStore, attempt: CheckpointAttempt
) -> CheckpointOutcome | None:
    """The outcome of `attempt`, or a strictly newer outcome that proves it closed (LA-14:
    answerable after compaction through the anchors); None while it may still settle."""
    if not attempt.is_canonical():
        raise Refused(
            "cluster checkpoint settlement requires one nonzero canonical checkpoint ID: epoch "
            f"{attempt.epoch}, checkpoint {attempt.checkpoint_id}"
        )
    outcomes = (await _audited(authority))[1]
    exact = at_epoch(outcomes, attempt.epoch)
    if exact is not None:
        return exact
    if outcomes and outcomes[-1].checkpoint_id > attempt.checkpoint_id:
        return outcomes[-1]  # a strict dominator
    return None


async def cluster_outcome_retention_boundary(
    authority: LeaderLeaseStore,
) -> ClusterOutcomeRetentionBoundary:
    """The head floor's boundary, read without an audit (LA §11.11)."""
    head = await authority.load_record()
    return ClusterOutcomeRetentionBoundary.from_floor(None if head is None else head.outcome_floor)


async def audited_cluster_outcome_retention_boundary(
    authority: LeaderLeaseStore, *, deadline: float
) -> ClusterOutcomeRetentionBoundary:
    """The boundary after a full audit and the capsule preflight (no artifact check)."""

    async def no_artifact_check(_: CheckpointOutcome) -> None:
        return None

    inventory = await validated_cluster_outcome_inventory(
        authority, no_artifact_check, deadline=deadline
    )
    return inventory.retention_boundary


async def validated_cluster_outcome_inventory(
    authority: LeaderLeaseStore, validate_artifacts: ValidateArtifacts, *, deadline: float
) -> ClusterOutcomeInventory:
    """LA §4.4.4: the audited inventory, after the recovery-cut preflight passed and both outcome
    heads and the floor stayed unchanged around it (Fenced without a head)."""

    async def decide(
        head: LeaderAuthorityRecord, _: admission.RequireTerm
    ) -> admission.Decision[ClusterOutcomeInventory]:
        snapshot = await cached_audit(authority, head)
        if head.outcome_floor is not None:
            await preflight_recovery_cut(
                authority, head.outcome_floor, snapshot.outcomes, validate_artifacts
            )
        # The preflight read remotely: the answer holds only if no outcome or floor moved.
        return admission.Answer(
            inventory_of(head, snapshot.outcomes),
            still=lambda again: same_outcome_state(head, again),
        )

    what = "validated cluster outcome inventory"
    return await admission.admit(authority, proof=None, decide=decide, what=what, deadline=deadline)


async def maintain_cluster_recovery_capsules(authority: LeaderLeaseStore) -> RecoveryCapsuleGcStep:
    """LA §4.4.9: one bounded capsule sweep below the artifact floor, sparing every capsule a live
    outcome names (LA-14). Independent of floor publication: a failure revokes no floor."""
    head = await authority.load_record()
    if head is None:
        raise Fenced("cluster recovery capsule maintenance: no durable leader authority head")
    snapshot = await cached_audit(authority, head)
    floor = head.outcome_floor
    if floor is None or floor.artifact_before_epoch == 0:
        return RecoveryCapsuleGcStep(examined=0, deleted=0, quarantined=0, pending=False)
    live = frozenset(
        outcome.recovery_capsule.sha256
        for outcome in snapshot.outcomes
        if outcome.epoch >= floor.artifact_before_epoch and outcome.recovery_capsule is not None
    )
    return await authority.require_decisions().sweep_recovery_capsules_step(
        floor.artifact_before_epoch, live
    )
