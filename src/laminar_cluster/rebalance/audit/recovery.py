"""The recovery audit of one assignment generation (RB §2.10, RB §4.16 "Recovery audit",
RB §4.9 `validate_portable_recovery_cut`; RB-10, RB-14).

A committed generation v >= 2 without a drain transition must be explained by the recovery
decision the leader authority admitted for v: the materialized snapshot is exactly the staged
proposal the decision names, its committed predecessor v-1 is exactly the decision's
predecessor, and the recovery checkpoint stands in one of three states (RB §2.10):

* ACTIVE: the handoff pin on the target is the decision's recovery checkpoint, which is still
  the newest committed cluster checkpoint (a decision on the initial state, LA-20: the pin names
  no checkpoint and no cluster checkpoint has committed at all);
* CONSUMED: no pin, and the newest committed checkpoint was taken under the target itself (the
  older handoff artifact may already be collected);
* PROPAGATED: the decision of v+1 moved the same pin on to its own target, not materialized yet.
  Besides a recovery decision D(v+1) (RB §4.16) we also accept a drain Abort from this target: its
  rollback inherits the same restore cut (`authority.handoff_pins`), and without it a leader that
  crashed between recording that Abort and materializing it could never finish the orphan
  drain, whose predecessor audit would fail forever.

Our "checkpoint index" is the `ClusterRecoveryCapsule` the Commit outcome points to, loaded and
verified through the DecisionStore (`cluster_outcome_with_recovery_capsule`): it carries the
assignment fence the cut was taken under (the origin) and the `portable` flag.

Callers fail closed (RB §4.11 Suspend, RB §4.3 retry). Durable records that contradict each other
(no decision for a committed generation, a snapshot that is not the admitted proposal, a
successor decision that does not propagate the cut, a checkpoint index inconsistent with its
outcome) are CorruptRecord; what a re-read may settle (a pruned predecessor, a decision below the
floor, a pin or committed head that moved between reads, a cut not portable to this
predecessor) is Refused. The reason names the check (`refusals.Refusal`).
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    assignment_recovery_decision,
)
from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_outcome_with_recovery_capsule,
    highest_cluster_committed_outcome,
)
from laminar_cluster.authority.handoff_pins import (
    HandoffPin,
    assignment_handoff_pin_on,
    rollback_fence,
)
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointScope,
    ClusterRecoveryCapsule,
    RecoveryCapsuleRef,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument, Refused, restated
from laminar_cluster.fencing import CheckpointAssignmentFence, fence_is_canonical
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentRecoveryDecision, AssignmentVerdict
from laminar_cluster.rebalance.audit.results import (
    AuditedAssignmentAuthority,
    AuditedRecoveryCheckpoint,
    PinState,
)
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.interfaces import cut_name
from laminar_cluster.rebalance.refusals import Refusal, predecessor_lost

__all__ = [
    "audit_recovery_generation",
    "load_portable_cut",
    "recovery_decision",
    "validate_portable_recovery_cut",
]


async def audit_recovery_generation(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot
) -> AuditedAssignmentAuthority:
    """RB §4.16 "Recovery audit" of the committed generation `snapshot` (the caller bounds it)."""
    version = snapshot.assignment_version
    decision = await recovery_decision(ctx.authority, version)
    if decision is None:
        raise CorruptRecord(
            f"assignment {version}: no drain transition or recovery authority decision",
            key=snapshot_path(version),
            reason=Refusal.NO_AUTHORITY_DECISION,
        )
    await _check_materialization(ctx, snapshot, decision)
    head = await highest_cluster_committed_outcome(ctx.authority)
    if head is not None and head.recovery_capsule is None:
        raise CorruptRecord(f"cluster Commit epoch {head.epoch} names no checkpoint index")
    if head is None and decision.recovery_checkpoint is not None:
        raise CorruptRecord(
            f"recovery assignment {version} requires a committed cluster checkpoint",
            key=snapshot_path(version),
            reason=Refusal.NO_COMMITTED_CHECKPOINT,
        )
    pin = await assignment_handoff_pin_on(ctx.authority, decision.target)
    if pin is not None:
        state = await _active(ctx.authority, decision, head, pin)
    elif head is not None and head.assignment_fence == decision.target:
        head_ref = head.recovery_capsule
        assert head_ref is not None  # checked above
        index = await load_portable_cut(ctx.authority, head, head_ref, decision.target)
        state = AuditedRecoveryCheckpoint(PinState.CONSUMED, head_ref, index.assignment_fence)
    else:
        state = await _propagated(ctx.authority, decision, head)
    return AuditedAssignmentAuthority(
        target_version=version,
        predecessor=decision.predecessor,
        recovery=state,
        recovery_leader_proof=decision.leader_proof,
    )


async def recovery_decision(
    authority: LeaderLeaseStore, version: int
) -> AssignmentRecoveryDecision | None:
    """The admitted recovery decision of `version`, or None; a version the authority settled
    otherwise (a drain decision, or below the decision floor) is Refused
    (NO_AUTHORITY_DECISION)."""
    try:
        return await assignment_recovery_decision(authority, version)
    except Refused as error:
        raise restated(
            error,
            f"assignment {version}: no drain transition or recovery authority decision ({error})",
            reason=Refusal.NO_AUTHORITY_DECISION,
        ) from error


async def _check_materialization(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, decision: AssignmentRecoveryDecision
) -> None:
    """The snapshot is the staged proposal of the decision, and v-1 is its exact predecessor."""
    version = snapshot.assignment_version
    key = snapshot_path(version)
    try:
        proposal = await ctx.snapshots.load_recovery_proposal_snapshot(decision.proposal)
    except InvalidArgument as error:  # the durable decision names a malformed proposal
        raise CorruptRecord(
            f"recovery assignment {version}: {error}", key=key, reason=Refusal.DECISION_MISMATCH
        ) from error
    if proposal != snapshot or snapshot_fence(proposal) != decision.target:
        raise CorruptRecord(
            f"recovery assignment {version} is not the proposal its authority decision admitted",
            key=key,
            reason=Refusal.DECISION_MISMATCH,
        )
    predecessor = await ctx.snapshots.load_version(version - 1)
    if predecessor is None:
        raise predecessor_lost(version)
    if predecessor.draining or snapshot_fence(predecessor) != decision.predecessor:
        raise CorruptRecord(
            f"recovery assignment {version} does not bind its exact committed predecessor",
            key=key,
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )


async def _active(
    authority: LeaderLeaseStore,
    decision: AssignmentRecoveryDecision,
    head: CheckpointOutcome | None,
    pin: HandoffPin,
) -> AuditedRecoveryCheckpoint:
    """ACTIVE: the pin on the target is the recovery checkpoint and still the committed head
    (for the initial state: the pin names none and nothing has committed, LA-20)."""
    version = decision.target_version
    head_ref = None if head is None else head.recovery_capsule
    if pin.checkpoint != decision.recovery_checkpoint or pin.checkpoint != head_ref:
        raise Refused(
            f"recovery assignment {version}: the handoff pin ({cut_name(pin.checkpoint)}) is "
            f"not the recovery checkpoint ({cut_name(decision.recovery_checkpoint)}) and the "
            f"latest committed cluster checkpoint ({cut_name(head_ref)})",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if pin.checkpoint is None or head is None:
        return AuditedRecoveryCheckpoint(PinState.ACTIVE, None, None)
    index = await load_portable_cut(authority, head, pin.checkpoint, decision.predecessor)
    return AuditedRecoveryCheckpoint(PinState.ACTIVE, pin.checkpoint, index.assignment_fence)


async def _propagated(
    authority: LeaderLeaseStore,
    decision: AssignmentRecoveryDecision,
    head: CheckpointOutcome | None,
) -> AuditedRecoveryCheckpoint:
    """PROPAGATED: the decision of v+1 carries the same checkpoint (or the initial state) on
    to the fence it pins."""
    version = decision.target_version
    head_ref = None if head is None else head.recovery_capsule
    successor = await _successor_pin_target(authority, decision)
    if decision.recovery_checkpoint != head_ref:
        raise Refused(
            f"recovery assignment {version}: the recovery checkpoint "
            f"({cut_name(decision.recovery_checkpoint)}) is no longer the latest committed "
            f"cluster checkpoint ({cut_name(head_ref)})",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    pin = await assignment_handoff_pin_on(authority, successor)
    if pin is None or pin.checkpoint != head_ref:
        raise Refused(
            f"recovery assignment {version}: the checkpoint pin is not on the successor of "
            f"assignment {version}",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if decision.recovery_checkpoint is None or head is None:
        return AuditedRecoveryCheckpoint(PinState.PROPAGATED, None, None, successor)
    index = await load_portable_cut(
        authority, head, decision.recovery_checkpoint, decision.predecessor
    )
    return AuditedRecoveryCheckpoint(
        PinState.PROPAGATED, decision.recovery_checkpoint, index.assignment_fence, successor
    )


async def _successor_pin_target(
    authority: LeaderLeaseStore, decision: AssignmentRecoveryDecision
) -> CheckpointAssignmentFence:
    """The fence the decision of v+1 moved the pin to: a recovery successor D(v+1) with the
    same recovery checkpoint (RB §4.16), or (our extension) a drain Abort from this target, whose
    rollback inherits the same restore cut (`handoff_pins`: no Commit under the target exists
    yet). Without the latter, a leader that crashed between recording that Abort and
    materializing it could never finish the orphan drain: its prior audit would fail."""
    version = decision.target_version
    try:
        successor = await assignment_recovery_decision(authority, version + 1)
    except Refused:
        successor = None
        drain = await assignment_drain_decision(authority, version + 1)
        if (
            drain is not None
            and drain.verdict is AssignmentVerdict.ABORT
            and drain.transition.predecessor == decision.target
        ):
            return rollback_fence(drain)
    if successor is None:
        raise Refused(
            f"recovery assignment {version}: checkpoint pin was superseded before the target "
            "committed",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if (
        successor.predecessor != decision.target
        or successor.recovery_checkpoint != decision.recovery_checkpoint
    ):
        raise CorruptRecord(
            f"recovery assignment {version}: recovery successor {version + 1} does not "
            "propagate the same recovery checkpoint from this target",
            key=snapshot_path(version + 1),
            reason=Refusal.DECISION_MISMATCH,
        )
    return successor.target


async def load_portable_cut(
    authority: LeaderLeaseStore,
    head: CheckpointOutcome,
    ref: RecoveryCapsuleRef,
    predecessor: CheckpointAssignmentFence,
) -> ClusterRecoveryCapsule:
    """Reload `head`'s outcome and its index, require the outcome unchanged, and validate the
    cut against `predecessor` (RB §4.9 step 10); returns the index, whose fence is the origin."""
    loaded = await cluster_outcome_with_recovery_capsule(authority, head.epoch)
    if loaded is None or loaded[0] != head or loaded[1] is None:
        raise Refused(
            f"recovery checkpoint epoch {head.epoch} changed or lost its checkpoint index",
            reason=Refusal.RECOVERY_CHECKPOINT_CHANGED,
        )
    validate_portable_recovery_cut(loaded[0], loaded[1], ref, predecessor)
    return loaded[1]


def validate_portable_recovery_cut(
    outcome: CheckpointOutcome,
    index: ClusterRecoveryCapsule,
    ref: RecoveryCapsuleRef,
    predecessor: CheckpointAssignmentFence,
) -> CheckpointAssignmentFence:
    """RB §4.9 `validate_portable_recovery_cut`: `outcome` is a cluster Commit of `ref`, `index`
    (its capsule) is reassignment-portable, and its origin fence is compatible with
    `predecessor` (RB-14). Returns the origin fence. An outcome, reference and index that do not
    describe one cluster Commit are CorruptRecord; a consistent cut that does not fit
    `predecessor` is Refused. The reason is the failed check (a `Refusal.CUT_*`)."""
    failed = _cut_problem(outcome, index, ref, predecessor)
    if failed is None:
        return index.assignment_fence
    reason, problem = failed
    message = (
        f"recovery checkpoint epoch {ref.epoch} is not a reassignment-portable cluster cut "
        f"for assignment {predecessor.assignment_version}: {problem}"
    )
    if reason in _CUT_RECORD_PROBLEMS:
        raise CorruptRecord(message, reason=reason)
    raise Refused(message, reason=reason)


# What each failed check of `_cut_problem` says, in the order they run.
_CUT_PROBLEMS: Final = {
    Refusal.CUT_NOT_CLUSTER_COMMIT: "not a cluster Commit",
    Refusal.CUT_OTHER_INDEX: "the outcome names another checkpoint index",
    Refusal.CUT_ATTEMPTS_DIFFER: "outcome, reference and index name different attempts",
    Refusal.CUT_OTHER_DEPLOYMENT: "index of another deployment",
    Refusal.CUT_FENCES_DIFFER: "outcome and index fences differ",
    Refusal.CUT_NO_LEADER_PROOF: "the outcome has no leader proof",
    Refusal.CUT_NOT_PORTABLE: "the index is not reassignment-portable",
    Refusal.CUT_FENCE_NOT_CANONICAL: "a fence is not canonical",
    Refusal.CUT_ORIGIN_NEWER: "origin is newer",
    Refusal.CUT_VNODE_COUNTS_DIFFER: "vnode counts differ",
    Refusal.CUT_ORIGIN_NOT_PREDECESSOR: "origin differs from the predecessor at the same version",
}
# The checks of one cluster Commit against itself; the others check it fits the predecessor.
_CUT_RECORD_PROBLEMS: Final = frozenset(
    {
        Refusal.CUT_NOT_CLUSTER_COMMIT,
        Refusal.CUT_OTHER_INDEX,
        Refusal.CUT_ATTEMPTS_DIFFER,
        Refusal.CUT_OTHER_DEPLOYMENT,
        Refusal.CUT_FENCES_DIFFER,
        Refusal.CUT_NO_LEADER_PROOF,
    }
)


def _cut_problem(
    outcome: CheckpointOutcome,
    index: ClusterRecoveryCapsule,
    ref: RecoveryCapsuleRef,
    predecessor: CheckpointAssignmentFence,
) -> tuple[Refusal, str] | None:
    origin = index.assignment_fence
    attempts = {
        (outcome.epoch, outcome.checkpoint_id),
        (ref.epoch, ref.checkpoint_id),
        (index.attempt.epoch, index.attempt.checkpoint_id),
    }
    same_version = origin.assignment_version == predecessor.assignment_version
    passed = (
        outcome.is_commit() and outcome.scope is CheckpointScope.CLUSTER,
        outcome.recovery_capsule == ref,
        len(attempts) == 1,
        outcome.deployment_id == index.deployment_id,
        outcome.assignment_fence == origin,
        outcome.leader_proof is not None,
        index.portable,
        fence_is_canonical(origin) and fence_is_canonical(predecessor),
        origin.assignment_version <= predecessor.assignment_version,
        origin.vnode_count == predecessor.vnode_count,
        not same_version or origin == predecessor,
    )
    checks = zip(passed, _CUT_PROBLEMS.items(), strict=True)
    return next(((reason, text) for ok, (reason, text) in checks if not ok), None)
