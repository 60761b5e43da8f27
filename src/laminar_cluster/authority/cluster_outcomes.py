"""Cluster checkpoint outcomes through the leader authority log: admission
(LA §4.4.1; invariants LA-5, LA-13, LA-21) and the public surface of the outcome operations.

`record_cluster_outcome` admits one outcome per epoch by appending the record after the head
whose lease its proof names (LA-5): an identical outcome already durable is `Unchanged`, a
different one `Conflict(winner)` (LA-13). Before the append it refuses (Refused) a non-advancing
checkpoint, a Commit beyond the live-Commit capacity (LA-21), an outcome below or outside the
floor, and a Commit not fenced by the active assignment handoff pin's target
(RB §2.9, `handoff_pins`; its reads run inside the same deadline), and compacts the terminal
history at 64 live links (LA §4.4.6). A lost race is re-derived from the winner: our outcome in its
audited history settles the call; a foreign term is Fenced; a winner that did not advance the
log is CorruptRecord; anything else is retried by `admission.admit`, at most
AUTHORITY_MUTATION_ATTEMPTS_MAX times (then Contended) and until the caller's absolute monotonic
`deadline`.

The reads (LA §4.4.2, LA §4.4.4, LA §4.4.9) are in `cluster_outcome_reads`, retention (LA §4.4.5 to
LA §4.4.8) in `cluster_outcome_floors`, the audit (LA §4.4.3) in `outcome_audit`; all are
re-exported here. Error kinds: `Fenced` -> Fenced; the decision store's `Conflict` -> Refused (the
request as asked is forbidden by what is durable); `Io` -> StoreUnavailable; corrupt durable state
-> CorruptRecord.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from laminar_cluster.authority import admission
from laminar_cluster.authority.cluster_outcome_floors import (
    ValidateArtifacts,
    compaction,
    prune_cluster_outcomes_before,
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
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
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
    """Admit the cluster outcome of one attempt under `proof` (LA §4.4.1)."""
    admission.require_canonical_proof(proof, _RECORD)
    if not CheckpointAttempt(epoch=epoch, checkpoint_id=checkpoint_id).is_canonical():
        raise Refused(
            "cluster checkpoint outcomes require one nonzero canonical checkpoint ID: epoch "
            f"{epoch}, checkpoint {checkpoint_id}"
        )
    async with within_deadline(authority.clock, deadline, _RECORD):
        # LA §4.4.1 step 2: only the current term builds a candidate (LA-5).
        admission.check_term(
            (await admission.published_head(authority, _RECORD)).record.lease, proof, _RECORD
        )
        # A Commit's capsule is loaded and matched; the proof's node and boot must be in the
        # fence; the deployment identity is created if absent (LA §11.3).
        candidate = await authority.require_decisions().canonical_outcome(
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            scope=CheckpointScope.CLUSTER,
            verdict=verdict,
            assignment_fence=assignment_fence,
            leader_proof=proof,
            recovery_capsule=recovery_capsule,
        )

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> admission.Decision[RecordOutcomeResult]:
        if not require_term.raced:
            require_term()  # LA §4.4.1 step 4.1: a fresh head is checked first (LA-5)
        # A race winner may hold our own record below it: answer from it first (LA §11.1).
        snapshot = await cached_audit(authority, head)
        settled = _settled(snapshot, candidate)
        if settled is not None:
            return admission.Answer(settled)
        require_term()  # LA-5
        _check_admissible(head, snapshot, candidate, authority.live_commit_links_max)
        if candidate.is_commit():
            # RB §2.9: derived from the head the append is conditioned on, so a decision admitted
            # in between makes the append contend and the pin is derived again.
            _check_pinned(await handoff_pin_at(authority, head, snapshot.outcomes), candidate)
        compact = await compaction(authority, head, snapshot)
        if compact is not None:
            return compact  # then decided again on the head that carries the new floor
        return _outcome_append(authority, head, snapshot, candidate)

    return await admission.admit(
        authority, proof=proof, decide=decide, what=_RECORD, deadline=deadline
    )


def _outcome_append(
    authority: LeaderLeaseStore,
    current: LeaderAuthorityRecord,
    snapshot: OutcomeSnapshot,
    candidate: CheckpointOutcome,
) -> admission.Append[RecordOutcomeResult]:
    """The admitting record; once durable, its audit is the old one extended by `candidate`.
    An ambiguous create that applied is Unchanged, never `Created`."""
    record = _outcome_record(current, candidate)
    link = record.outcome_head
    assert link is not None  # set by _outcome_record
    extended = OutcomeSnapshot(
        outcomes=(*snapshot.outcomes, candidate),
        terminal_links=(*snapshot.terminal_links, link),
        commit_links=(*snapshot.commit_links, link)
        if candidate.is_commit()
        else snapshot.commit_links,
    )
    return admission.Append(
        record,
        Created(candidate),
        Unchanged(candidate),
        lambda: audit_cache(authority).install(audit_key(record), record.lease.seq, extended),
    )


def _settled(snapshot: OutcomeSnapshot, candidate: CheckpointOutcome) -> RecordOutcomeResult | None:
    """LA-13: one outcome per epoch forever; anchors and lagged Commits count."""
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
    """LA §4.4.1 steps 4-6: what is durable refuses the candidate (Refused), or admits it.
    `live_commits_max` is LA-21's bound (MAX_LIVE_AUTHORITY_LINKS, lower only in tests)."""
    assert 1 <= live_commits_max <= MAX_LIVE_AUTHORITY_LINKS
    if snapshot.outcomes and candidate.checkpoint_id <= snapshot.outcomes[-1].checkpoint_id:
        raise Refused(  # LA-13: outcomes strictly increase
            f"cluster checkpoint {candidate.checkpoint_id} does not advance durable checkpoint "
            f"{snapshot.outcomes[-1].checkpoint_id}"
        )
    if candidate.is_commit() and len(snapshot.commit_links) >= live_commits_max:
        raise Refused(  # LA-21: the Commit chain walk stays bounded
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
    """RB §2.9: while an assignment handoff pin is active, only a Commit fenced by
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
    """LA §4.4.1 step 8: the admitting record after `current`, linked into both chains."""
    link = OutcomeLink(
        sequence=current.lease.seq + 1, epoch=candidate.epoch, checkpoint_id=candidate.checkpoint_id
    )
    record = admission.successor(
        current,
        checkpoint_outcome=candidate,
        previous_outcome=current.outcome_head,
        outcome_head=link,
    )
    if candidate.is_commit():  # LA-13: a Commit also heads the Commit chain
        record = msgspec.structs.replace(
            record, previous_commit=current.commit_head, commit_head=link
        )
    return record  # validated (and size-checked) by the append, before any write
