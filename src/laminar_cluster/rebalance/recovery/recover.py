"""The recovery path, leader side (RB §1.2, RB §4.9, RB §4.14 `adopt_any`; RB-13, RB-14).

When some predecessor owner cannot certify its source cut, the leader moves to a *recovery
successor*: it closes local authority and lease-fences every removed predecessor process,
stages the proposal under its content address, chooses the recovery checkpoint (the active
handoff pin of the predecessor, else the latest committed cluster checkpoint, which must be
fenced by the predecessor and reassignment-portable), records an immutable
`AssignmentRecoveryDecision` (first writer wins per target version) and materializes it. Every
participant then faults, settles the predecessor's in-flight checkpoint (leader only) and
restores cold from the recovery checkpoint.

* `authorize_recovery_successor` (RB §4.9), `materialize_recovery_decision`,
  `reconcile_pending_recovery_decision`: decide, install, and finish what a crashed leader left.
* `adopt_materialized_recovery_head` (RB §4.3 step 11), `prepare_recovery_assignment_adoption`,
  `prepare_watched_recovery_adoption` (the watcher's variant, RB §4.11 B), `adopt_any`
  (RB §4.14) and `require_recovery_cold_bootstrap`: adopt a recovery generation locally.
* `abort_predecessor_checkpoint_for_recovery` (RB §4.10) lives in `recovery_inflight`.

Pruning after materialization runs inline and best effort (`history.prune_after`), not in a
background task: STYLE forbids tasks outside a TaskGroup, and an inline prune cannot be lost.

Errors: no live leader proof is Fenced; a process that still renews is Refused (PROCESS_RENEWED,
from the fencing); a head or pin that moved, a lagging adoption or an engine that is not cold
is Refused; a staged proposal, materialized winner or pending decision that contradicts the
decision is CorruptRecord (DECISION_MISMATCH).
"""

from __future__ import annotations

import logging
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import Conflict, Rotated
from laminar_cluster.authority.assignment_decisions import (
    DecisionConflict,
    materialize_assignment_recovery,
    new_recovery_decision,
    record_assignment_recovery_decision,
)
from laminar_cluster.authority.cluster_outcome_reads import highest_cluster_committed_outcome
from laminar_cluster.authority.handoff_pins import assignment_handoff_pin_on
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    Refused,
    restated,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentRecoveryDecision
from laminar_cluster.rebalance.audit.binding import (
    RecoveryScope,
    certifies_another_boot,
    local_recovery_assignment_scope,
)
from laminar_cluster.rebalance.audit.drain import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.recovery import load_portable_cut, recovery_decision
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import (
    close_local_assignment_authority,
    ensure_local_recovery_fault,
    suspend_recovery_assignment_authority,
)
from laminar_cluster.rebalance.history import prune_after
from laminar_cluster.rebalance.interfaces import EngineState, cut_name, recovery_cut
from laminar_cluster.rebalance.recovery.inflight import (
    abort_predecessor_checkpoint_for_recovery,
    settle_predecessor_checkpoint,
)
from laminar_cluster.rebalance.refusals import Refusal

__all__ = [
    "abort_predecessor_checkpoint_for_recovery",
    "adopt_any",
    "adopt_materialized_recovery_head",
    "authorize_recovery_successor",
    "materialize_recovery_decision",
    "prepare_recovery_assignment_adoption",
    "prepare_watched_recovery_adoption",
    "reconcile_pending_recovery_decision",
    "removed_predecessor_processes",
    "require_recovery_cold_bootstrap",
]

logger: Final = logging.getLogger(__name__)
_COLD_STATES: Final = frozenset({EngineState.CREATED, EngineState.FAULTED})


def removed_predecessor_processes(
    predecessor: CheckpointAssignmentFence, target: CheckpointAssignmentFence
) -> list[FenceParticipant]:
    """Predecessor processes whose exact (node, boot) the target no longer certifies (RB §2.6)."""
    return [
        p
        for p in predecessor.participants
        if target.participant_incarnation(p.node_id) != p.boot_incarnation
    ]


async def authorize_recovery_successor(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    proposal: AssignmentSnapshot,
    reason: str,
) -> AssignmentRecoveryDecision:
    """RB §4.9 `authorize_recovery_successor`: fence the removed processes, then record the
    recovery decision (or obey the winner already recorded for that version)."""
    predecessor, target = snapshot_fence(current), snapshot_fence(proposal)
    version = proposal.assignment_version
    deadline = ctx.controller.process_fencing_deadline(ctx.config.checkpoint_timeout_s)
    removed = removed_predecessor_processes(predecessor, target)
    if not removed:
        raise InvalidArgument(f"recovery assignment {version} removes no predecessor process")
    # RB-13: every removed process is lease-fenced before anything is recorded.
    fences = await close_local_assignment_authority(ctx, target, removed, deadline=deadline)
    async with within_deadline(ctx.clock, deadline, f"recovery assignment {version} staging"):
        ref = await ctx.snapshots.stage_recovery_proposal(proposal)
        if await ctx.snapshots.load() != current:
            raise Refused(
                f"recovery assignment {version}: head advanced while process fencing was in "
                "progress",
                reason=Refusal.HEAD_MOVED,
            )
    await audit_snapshot_authority_outcome(ctx, current, deadline=deadline)
    for participant in target.participants:
        if not await ctx.controller.verify_current_process_incarnation(
            participant, deadline=ctx.head_deadline()
        ):
            raise Refused(
                f"recovery assignment {version}: successor process node-{participant.node_id} "
                f"boot {participant.boot_incarnation} is not the current durable lease owner",
                reason=Refusal.NO_LIVE_INCARNATION,
            )
    async with within_deadline(ctx.clock, deadline, f"recovery assignment {version} checkpoint"):
        checkpoint = await choose_recovery_checkpoint(ctx, predecessor)
    proof = ctx.controller.capture_leader_proof()
    if proof is None:
        raise Fenced(f"recovery assignment {version} requires a live leader proof")
    try:
        request = new_recovery_decision(predecessor, target, ref, fences, checkpoint, proof)
    except InvalidArgument as error:
        raise restated(error, f"recovery assignment {version} decision refused: {error}") from error
    recorded = await record_assignment_recovery_decision(
        ctx.authority, proof, request, ctx.snapshots, deadline=deadline
    )
    decision = recorded.winner if isinstance(recorded, DecisionConflict) else recorded.decision
    logger.info(  # a decision taken, not a fault
        "assignment %d: recovery successor %d authorized (%s); %s",
        current.assignment_version,
        decision.target_version,
        reason,
        cut_name(decision.recovery_checkpoint),
    )
    return decision


async def choose_recovery_checkpoint(
    ctx: RebalanceContext, predecessor: CheckpointAssignmentFence
) -> RecoveryCapsuleRef | None:
    """RB §4.9 steps 9-10: the predecessor's active handoff pin, else the latest committed cluster
    checkpoint fenced by the predecessor; either way the latest Commit, portable (RB-14).

    None (the initial state, LA-20) when no cluster checkpoint has committed: there is nothing
    committed to restore or to lose. The authority admits such a decision only while its head
    still has no Commit, so a Commit landing after this read makes the record Contended."""
    version = predecessor.assignment_version
    head = await highest_cluster_committed_outcome(ctx.authority)
    found = await assignment_handoff_pin_on(ctx.authority, predecessor)
    pin = None if found is None else found.checkpoint
    if head is None and pin is None:
        return None
    if head is None or head.recovery_capsule is None:
        raise Refused(
            f"recovery from assignment {version} requires a committed cluster checkpoint",
            reason=Refusal.NO_COMMITTED_CHECKPOINT,
        )
    head_ref = head.recovery_capsule
    if found is not None and pin != head_ref:
        raise Refused(
            f"recovery from assignment {version}: the handoff pin ({cut_name(pin)}) is not "
            f"the latest committed cluster checkpoint (epoch {head.epoch})",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if found is None and head.assignment_fence != predecessor:
        raise Refused(
            f"recovery from assignment {version}: latest committed cluster checkpoint (epoch "
            f"{head.epoch}) does not bind the recovery predecessor",
            reason=Refusal.NO_COMMITTED_CHECKPOINT,
        )
    await load_portable_cut(ctx.authority, head, head_ref, predecessor)
    return head_ref


async def materialize_recovery_decision(
    ctx: RebalanceContext, decision: AssignmentRecoveryDecision, *, timeout_s: float
) -> int:
    """RB §4.9 `materialize_recovery_decision`: install the decided successor and adopt it."""
    deadline = ctx.deadline_in(timeout_s)
    version = decision.target_version
    proof = ctx.controller.capture_leader_proof()
    await close_local_assignment_authority(ctx, decision.target, (), deadline=deadline)
    async with within_deadline(ctx.clock, deadline, f"recovery assignment {version} install"):
        proposal = await ctx.snapshots.load_recovery_proposal_snapshot(decision.proposal)
        if snapshot_fence(proposal) != decision.target:
            raise CorruptRecord(
                f"recovery assignment {version}: the staged proposal is not the decided target",
                reason=Refusal.DECISION_MISMATCH,
            )
        replaced = certifies_another_boot(proposal, ctx.me)
        if not replaced:
            local_recovery_assignment_scope(proposal, ctx.me)
        result = await materialize_assignment_recovery(ctx.authority, version, ctx.snapshots)
    durable = result.snapshot if isinstance(result, Rotated) else None
    if isinstance(result, Conflict):
        durable = result.winner
    if durable != proposal:
        raise CorruptRecord(
            f"recovery assignment {version}: the materialized winner is not the authorized "
            "proposal",
            key=snapshot_path(version),
            reason=Refusal.DECISION_MISMATCH,
        )
    if replaced:
        # Deviation from RB §4.9 step 4 (which errs): the decision is durable and names our
        # previous boot, so only writing its snapshot lets anyone move on; we never run it. The
        # next attempt recovers that boot out of it like any replaced boot (RB-T48).
        logger.warning(
            "recovery assignment %d certifies a previous boot of node-%d: materialized, not "
            "adopted",
            version,
            ctx.me.node_id,
        )
        return version
    scope = await prepare_recovery_assignment_adoption(ctx, durable, deadline=deadline)
    cut = recovery_cut(decision.recovery_checkpoint) if scope is RecoveryScope.PARTICIPANT else None
    await ctx.engine.adopt_recovery_assignment(durable, cut, deadline=deadline)
    release_after_recovery_adoption(ctx, scope)
    try:
        async with within_deadline(ctx.clock, ctx.head_deadline(), f"assignment {version} prune"):
            await prune_after(ctx, version, proof)
    except DeadlineExceeded as error:  # best effort (RB §9 "Pruning"); the next rotation retries
        logger.warning("recovery assignment %d: prune incomplete: %s", version, error)
    return version


async def reconcile_pending_recovery_decision(
    ctx: RebalanceContext, current: AssignmentSnapshot
) -> int | None:
    """RB §4.9: materialize a recovery decision recorded for `current + 1`, if there is one."""
    target_version = current.assignment_version + 1
    async with within_deadline(
        ctx.clock, ctx.head_deadline(), f"pending recovery decision {target_version}"
    ):
        decision = await recovery_decision(ctx.authority, target_version)
    if decision is None:
        return None
    if decision.predecessor != snapshot_fence(current):
        raise CorruptRecord(
            f"pending recovery decision {target_version} does not name assignment "
            f"{current.assignment_version} as its predecessor",
            key=snapshot_path(current.assignment_version),
            reason=Refusal.DECISION_MISMATCH,
        )
    return await materialize_recovery_decision(
        ctx, decision, timeout_s=ctx.config.checkpoint_timeout_s
    )


async def adopt_materialized_recovery_head(
    ctx: RebalanceContext, current: AssignmentSnapshot
) -> int:
    """RB §4.3 step 11: this process lags behind a durable recovery head that binds it."""
    deadline = ctx.head_deadline()
    audited = await audit_snapshot_authority_outcome(ctx, current, deadline=deadline)
    await _adopt_recovery(ctx, current, audited, deadline=deadline)
    adopted = ctx.engine.registry().version
    if adopted < current.assignment_version:
        raise Refused(
            f"lagging local adoption of recovery assignment {current.assignment_version} did "
            "not apply",
            reason=Refusal.ADOPTION_LAGS,
        )
    return adopted


async def adopt_any(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, *, deadline: float
) -> None:
    """RB §4.14: validate a draining head (ownership never moves on one, RB-4), adopt a recovery
    generation through the recovery path, and any other committed head plainly."""
    audited = await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    if snapshot.draining:
        ctx.engine.validate_source_drain_snapshot(snapshot)
    elif audited.is_recovery:
        await _adopt_recovery(ctx, snapshot, audited, deadline=deadline)
    else:
        await ctx.engine.adopt_assignment(snapshot, deadline=deadline)


async def _adopt_recovery(
    ctx: RebalanceContext,
    snapshot: AssignmentSnapshot,
    audited: AuditedAssignmentAuthority,
    *,
    deadline: float,
) -> None:
    scope = await prepare_recovery_assignment_adoption(ctx, snapshot, deadline=deadline)
    cut = None
    if scope is RecoveryScope.PARTICIPANT and audited.recovery is not None:
        cut = audited.recovery.restore_cut
    await ctx.engine.adopt_recovery_assignment(snapshot, cut, deadline=deadline)
    release_after_recovery_adoption(ctx, scope)


def release_after_recovery_adoption(ctx: RebalanceContext, scope: RecoveryScope) -> None:
    """Our coordinated-recovery Release: a participant that restored cold from the recovery
    checkpoint leaves recovery mode, so live rotations (which defer while recovering) resume.
    The watcher does the same for followers."""
    if scope is RecoveryScope.PARTICIPANT:
        ctx.controller.set_recovering(False)


async def prepare_recovery_assignment_adoption(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, *, deadline: float
) -> RecoveryScope:
    """RB §4.9 step 6: suspend; a participant then faults, settles the predecessor's in-flight
    checkpoint (leader only) and must be able to bootstrap cold. Returns the local scope."""
    await suspend_recovery_assignment_authority(ctx, deadline=deadline)
    scope = local_recovery_assignment_scope(snapshot, ctx.me)
    if scope is RecoveryScope.OWNERLESS:
        return scope
    await ensure_local_recovery_fault(ctx, deadline=deadline)
    await abort_predecessor_checkpoint_for_recovery(ctx, snapshot, deadline=deadline)
    await require_recovery_cold_bootstrap(ctx, snapshot)
    return scope


async def prepare_watched_recovery_adoption(
    ctx: RebalanceContext,
    snapshot: AssignmentSnapshot,
    audited: AuditedAssignmentAuthority,
    *,
    deadline: float,
) -> int:
    """The watcher's variant (RB §4.11 B), after it suspended authority itself and found this
    process a participant: fault, settle the predecessor's in-flight checkpoint with the
    watcher's audit, check the cold bootstrap. Returns the engine's authority revision."""
    version = snapshot.assignment_version
    if not audited.is_recovery or audited.target_version != version:
        raise InvalidArgument(f"assignment {version} is not an audited recovery generation")
    if local_recovery_assignment_scope(snapshot, ctx.me) is not RecoveryScope.PARTICIPANT:
        raise InvalidArgument(
            f"recovery assignment {version} does not certify this process as a participant"
        )
    await ensure_local_recovery_fault(ctx, deadline=deadline)
    await settle_predecessor_checkpoint(ctx, snapshot, audited, deadline=deadline)
    await require_recovery_cold_bootstrap(ctx, snapshot)
    return ctx.engine.authority_revision()


async def require_recovery_cold_bootstrap(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot
) -> None:
    """A process that owns vnodes in a recovery generation restores them cold from the
    recovery checkpoint: its graph must be Created or Faulted with no installed vnode state.
    A running graph is faulted for the recovery assignment first; anything else is refused."""
    if ctx.me.node_id not in snapshot.owners:
        return
    engine = ctx.engine
    if engine.registry().version >= snapshot.assignment_version:
        # Already adopted (the leader's own materialization restored it): faulting again would
        # drop the restored state for good, because adopting the same version is a no-op.
        return
    if engine.state() not in _COLD_STATES or engine.installed_vnode_state():
        await engine.fault_for_recovery_assignment()
    if engine.state() not in _COLD_STATES or engine.installed_vnode_state():
        raise Refused(
            f"recovery assignment {snapshot.assignment_version} requires a cold bootstrap: the "
            f"local graph is {engine.state().value} with installed vnode state "
            f"{engine.installed_vnode_state()}",
            reason=Refusal.COLD_BOOTSTRAP_REQUIRED,
        )
