"""Cluster checkpoint outcomes through the leader authority log: admission (spec_leader_lease
§4.4.1; invariants S5, S11, S12, S22) and the public surface of the outcome operations.

`record_cluster_outcome` admits one outcome per epoch by appending the record after the head
whose lease its proof names (S5): an identical outcome already durable is `Unchanged`, a
different one `Conflict(winner)` (S11). Before the append it refuses (Refused) a non-advancing
checkpoint, a Commit beyond the live-Commit capacity (S22), an outcome below or outside the
floor, and a Commit not fenced by the active assignment handoff pin's target (spec_rebalance
§2.9, `handoff_pins`; its reads run inside the same deadline), and compacts the terminal
history at 64 live links (§4.4.6). A lost race is re-derived from the winner: our outcome in its
audited history settles the call; a foreign term is Fenced; a winner that did not advance the
log is CorruptRecord; anything else is retried, at most AUTHORITY_MUTATION_ATTEMPTS_MAX times
and until the caller's absolute monotonic `deadline`.

The reads (§4.4.2, §4.4.4, §4.4.9) are in `cluster_outcome_reads`, retention (§4.4.5-§4.4.8) in
`cluster_outcome_floors`, the audit (§4.4.3) in `outcome_audit`; all are re-exported here.
Error kinds: `Fenced` -> Fenced; the decision store's `Conflict` -> Refused (the request as
asked is forbidden by what is durable); `Io` -> StoreUnavailable; corrupt durable state ->
CorruptRecord.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from laminar_cluster.authority.cluster_outcome_floors import (
    ValidateArtifacts,
    compact_before_append,
    not_converged,
    prune_cluster_outcomes_before,
    require_canonical_proof,
    require_term,
    settle_contention,
    successor,
)
from laminar_cluster.authority.cluster_outcome_reads import (
    ClusterOutcomeInventory,
    ClusterOutcomeRetentionBoundary,
    at_epoch,
    audited_cluster_outcome_retention_boundary,
    cluster_attempt_settlement,
    cluster_outcome,
    cluster_outcome_inventory,
    cluster_outcome_retention_boundary,
    cluster_outcome_with_recovery_capsule,
    cluster_outcomes,
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
    maintain_cluster_recovery_capsules,
    validated_cluster_outcome_inventory,
)
from laminar_cluster.authority.handoff_pins import HandoffPin, handoff_pin_at
from laminar_cluster.authority.outcome_audit import (
    OutcomeSnapshot,
    audit_cache,
    audit_key,
    audit_outcomes,
    cached_audit,
)
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    Conflict,
    Created,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
    Unchanged,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.lease.limits import AUTHORITY_MUTATION_ATTEMPTS_MAX, MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.outcomes import AppendContended, AppendCreated
from laminar_cluster.lease.records import LeaderAuthorityRecord, OutcomeLink

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

__all__ = [
    "ClusterOutcomeInventory",
    "ClusterOutcomeRetentionBoundary",
    "OutcomeSnapshot",
    "ValidateArtifacts",
    "audit_outcomes",
    "audited_cluster_outcome_retention_boundary",
    "cluster_attempt_settlement",
    "cluster_outcome",
    "cluster_outcome_inventory",
    "cluster_outcome_retention_boundary",
    "cluster_outcome_with_recovery_capsule",
    "cluster_outcomes",
    "highest_cluster_committed_outcome",
    "highest_cluster_terminal_outcome",
    "maintain_cluster_recovery_capsules",
    "prune_cluster_outcomes_before",
    "record_cluster_outcome",
    "validated_cluster_outcome_inventory",
]

_RECORD: Final = "cluster outcome admission"


async def record_cluster_outcome(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    *,
    epoch: int,
    checkpoint_id: int,
    assignment_fence: CheckpointAssignmentFence,
    verdict: CheckpointVerdict,
    recovery_capsule: RecoveryCapsuleRef | None,
    deadline: float,
) -> RecordOutcomeResult:
    """Admit the cluster outcome of one attempt under `proof` (§4.4.1)."""
    require_canonical_proof(proof)
    if not CheckpointAttempt(epoch=epoch, checkpoint_id=checkpoint_id).is_canonical():
        raise Refused(
            "cluster checkpoint outcomes require one nonzero canonical checkpoint ID: epoch "
            f"{epoch}, checkpoint {checkpoint_id}"
        )
    async with within_deadline(authority.clock, deadline, _RECORD):
        require_term(await authority.load_record(), proof)
        # A Commit's capsule is loaded and matched; the proof's node and boot must be in the
        # fence; the deployment identity is created if absent (spec §11.3).
        candidate = await authority.require_decisions().canonical_outcome(
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            scope=CheckpointScope.CLUSTER,
            verdict=verdict,
            assignment_fence=assignment_fence,
            leader_proof=proof,
            recovery_capsule=recovery_capsule,
        )
        for attempt in range(AUTHORITY_MUTATION_ATTEMPTS_MAX):
            if attempt:
                await authority.clock.sleep(0)
            result = await _record_attempt(authority, proof, candidate)
            if result is not None:
                return result
    raise not_converged(_RECORD)


async def _record_attempt(
    authority: LeaderLeaseStore, proof: LeaderProof, candidate: CheckpointOutcome
) -> RecordOutcomeResult | None:
    """One pass of §4.4.1's loop: the result, or None to retry."""
    published = await authority.load_published_head()
    current = require_term(None if published is None else published.record, proof)  # S5
    snapshot = await cached_audit(authority, current)
    settled = _settled(snapshot, candidate)
    if settled is not None:
        return settled
    _check_admissible(current, snapshot, candidate, authority.live_commit_links_max)
    if candidate.is_commit():
        # §2.9: derived from the head the append below is conditioned on, so a decision
        # admitted in between makes the append contend and the pin is derived again.
        _check_pinned(await handoff_pin_at(authority, current, snapshot.outcomes), candidate)
    if await compact_before_append(authority, proof, current, snapshot):
        return None  # a floor was appended (or the head moved): re-derive from the new head
    record = _outcome_record(current, candidate)
    outcome = await authority.append(published, record)
    if isinstance(outcome, AppendContended):
        # Our record may be durable below the winner (spec §11.1): look for it there first.
        settled = _settled(await cached_audit(authority, outcome.winner), candidate)
        if settled is not None:
            return settled
        settle_contention(outcome.winner, proof, current.lease.seq, _RECORD)
        return None
    if not isinstance(outcome, AppendCreated):
        return Unchanged(candidate)  # an ambiguous create that applied is never `Created`
    link = record.outcome_head
    assert link is not None  # set by _outcome_record
    audit_cache(authority).install(
        audit_key(record),
        record.lease.seq,
        OutcomeSnapshot(
            outcomes=(*snapshot.outcomes, candidate),
            terminal_links=(*snapshot.terminal_links, link),
            commit_links=(*snapshot.commit_links, link)
            if candidate.is_commit()
            else snapshot.commit_links,
        ),
    )
    return Created(candidate)


def _settled(snapshot: OutcomeSnapshot, candidate: CheckpointOutcome) -> RecordOutcomeResult | None:
    """S11: one outcome per epoch forever; anchors and lagged Commits count."""
    winner = at_epoch(snapshot.outcomes, candidate.epoch)
    if winner is None:
        return None
    return Unchanged(winner) if winner == candidate else Conflict(winner)


def _check_admissible(
    current: LeaderAuthorityRecord,
    snapshot: OutcomeSnapshot,
    candidate: CheckpointOutcome,
    live_commits_max: int = MAX_LIVE_AUTHORITY_LINKS,
) -> None:
    """§4.4.1 steps 4-6: what is durable refuses the candidate (Refused), or admits it.
    `live_commits_max` is S22's bound (MAX_LIVE_AUTHORITY_LINKS, lower only in tests)."""
    assert 1 <= live_commits_max <= MAX_LIVE_AUTHORITY_LINKS
    if snapshot.outcomes and candidate.checkpoint_id <= snapshot.outcomes[-1].checkpoint_id:
        raise Refused(  # S11: outcomes strictly increase
            f"cluster checkpoint {candidate.checkpoint_id} does not advance durable checkpoint "
            f"{snapshot.outcomes[-1].checkpoint_id}"
        )
    if candidate.is_commit() and len(snapshot.commit_links) >= live_commits_max:
        raise Refused(  # S22: the Commit chain walk stays bounded
            f"live Commit retention reached the {live_commits_max}-link authority "
            "bound; advance the artifact-retention horizon before admitting another Commit"
        )
    floor = current.outcome_floor
    if floor is not None and (
        candidate.deployment_id != floor.deployment_id
        or candidate.epoch < floor.authority_before_epoch
    ):
        raise Refused(
            f"cluster outcome epoch {candidate.epoch} is below or outside authority floor "
            f"{floor.authority_before_epoch} of deployment {floor.deployment_id}"
        )


def _check_pinned(pin: HandoffPin | None, candidate: CheckpointOutcome) -> None:
    """spec_rebalance §2.9: while an assignment handoff pin is active, only a Commit fenced by
    its target is admitted (Aborts are never checked)."""
    if pin is None or candidate.assignment_fence == pin.target:
        return
    fence = candidate.assignment_fence
    version = None if fence is None else fence.assignment_version
    raise Refused(
        f"cluster Commit epoch {candidate.epoch} under assignment version {version} is not "
        f"fenced by the active assignment handoff pin target (version "
        f"{pin.target.assignment_version}, checkpoint epoch {pin.checkpoint_epoch})"
    )


def _outcome_record(
    current: LeaderAuthorityRecord, candidate: CheckpointOutcome
) -> LeaderAuthorityRecord:
    """§4.4.1 step 8: the admitting record after `current`, linked into both chains."""
    record = successor(current)
    link = OutcomeLink(
        sequence=record.lease.seq, epoch=candidate.epoch, checkpoint_id=candidate.checkpoint_id
    )
    record = msgspec.structs.replace(
        record,
        checkpoint_outcome=candidate,
        previous_outcome=current.outcome_head,
        outcome_head=link,
    )
    if candidate.is_commit():  # S12: a Commit also heads the Commit chain
        record = msgspec.structs.replace(
            record, previous_commit=current.commit_head, commit_head=link
        )
    return record  # validated (and size-checked) by the append, before any write
