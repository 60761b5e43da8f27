"""Authority audits of assignment generations (RB §2.10, RB §4.16; RB-10, RB-11).

Every committed version from 2 on must be explained by the leader authority: a drain terminal
by its drain decision (and its exact committed predecessor), a recovery generation by its
recovery decision (`recovery_audit`). A draining head is checked against its exact
predecessor, the live leader term and the absence of a decision. Each failure keeps the spec's
wording (RB §9), and callers fail closed. Durable objects that contradict each other (a terminal
without its decision, a decision naming another transition, a terminal not binding its exact
predecessor, a materialized outcome against the verdict) are CorruptRecord naming the snapshot;
what may change on a re-read (a pruned predecessor, a moved head, a superseded drain leader, a
lease not live now) is Refused; the reason says which check (`refusals.Refusal`).
"""

from __future__ import annotations

from laminar_cluster.assignment.model import is_rollback, snapshot_fence, to_vnode_vec
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.assignment_decisions import assignment_drain_decision
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import CorruptRecord, InvalidArgument, Refused
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition, AssignmentVerdict
from laminar_cluster.lease.validate_chains import lease_matches_proof
from laminar_cluster.rebalance.audit.results import (
    AuditedAssignmentAuthority,
    AuditedDrainOutcome,
)
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal, predecessor_lost


def finalized_drain_outcome(
    transition: AssignmentDrainTransition, terminal: AssignmentSnapshot
) -> SourceDrainOutcome:
    """Commit when `terminal` is the target, Abort when it is the rollback (RB §4.8 step 10, RB-5);
    CorruptRecord (TERMINAL_MISMATCH) for anything else."""
    target_version = transition.target.assignment_version
    if terminal.draining or terminal.assignment_version != target_version:
        raise CorruptRecord(
            f"drain terminal must be a committed snapshot at version {target_version}",
            key=snapshot_path(target_version),
            reason=Refusal.TERMINAL_MISMATCH,
        )
    fence = snapshot_fence(terminal)
    if fence == transition.target:
        return SourceDrainOutcome.COMMIT
    if is_rollback(fence, transition):
        return SourceDrainOutcome.ABORT
    raise CorruptRecord(
        f"drain terminal {target_version} is neither the transition's target nor its rollback",
        key=snapshot_path(target_version),
        reason=Refusal.TERMINAL_MISMATCH,
    )


def verdict_outcome(verdict: AssignmentVerdict) -> SourceDrainOutcome:
    return SourceDrainOutcome(verdict.value)


async def audit_snapshot_authority_outcome(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, *, deadline: float
) -> AuditedAssignmentAuthority:
    """RB §4.16 `audit_snapshot_authority_outcome`, bounded by `deadline`."""
    version = snapshot.assignment_version
    async with within_deadline(ctx.clock, deadline, f"assignment {version} authority audit"):
        if snapshot.draining or version == 1:
            return AuditedAssignmentAuthority(target_version=version)
        transition = await ctx.snapshots.load_drain_transition(version)
        if transition is None:
            from laminar_cluster.rebalance.audit.recovery import audit_recovery_generation

            return await audit_recovery_generation(ctx, snapshot)
        terminal = await audit_materialized_drain_transition(ctx, snapshot, transition)
        return AuditedAssignmentAuthority(
            target_version=version, predecessor=transition.predecessor, terminal=terminal
        )


async def audit_materialized_drain_transition(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, transition: AssignmentDrainTransition
) -> AuditedDrainOutcome:
    """A drain terminal: its decision, its exact committed predecessor and its verdict."""
    version = snapshot.assignment_version
    key = snapshot_path(version)
    decision = await assignment_drain_decision(ctx.authority, version)
    if decision is None:
        raise CorruptRecord(
            f"assignment {version}: materialized drain outcome without an authority decision",
            key=key,
            reason=Refusal.NO_AUTHORITY_DECISION,
        )
    if decision.transition != transition:
        raise CorruptRecord(
            f"assignment {version}: the drain decision names a different transition",
            key=key,
            reason=Refusal.DECISION_MISMATCH,
        )
    predecessor = await ctx.snapshots.load_version(version - 1)
    if predecessor is None:
        raise predecessor_lost(version)
    if predecessor.draining or snapshot_fence(predecessor) != transition.predecessor:
        raise CorruptRecord(
            f"assignment {version}: drain terminal does not bind its exact committed predecessor",
            key=key,
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )
    outcome = finalized_drain_outcome(transition, snapshot)
    if outcome is not verdict_outcome(decision.verdict):
        raise CorruptRecord(
            f"assignment {version}: materialized {outcome.value} contradicts the authority "
            f"verdict {decision.verdict.value}",
            key=key,
            reason=Refusal.TERMINAL_MISMATCH,
        )
    return AuditedDrainOutcome(
        transition=transition, outcome=outcome, handoff_checkpoint=decision.handoff_checkpoint
    )


async def audit_drain_predecessor(
    ctx: RebalanceContext, draining: AssignmentSnapshot
) -> AssignmentSnapshot:
    """A follower's check of a draining head (RB §4.16): exactly local+1, its committed
    predecessor equal to what runs here, no decision yet, and the opening term still leading."""
    transition = draining.drain_transition
    local = ctx.engine.registry()
    version = draining.assignment_version
    if transition is None:
        raise InvalidArgument(f"assignment {version} is not draining")
    if version != local.version + 1:
        raise Refused(
            f"draining assignment {version} is not the exact successor of local assignment "
            f"{local.version}",
            reason=Refusal.NOT_EXACT_SUCCESSOR,
        )
    to_vnode_vec(draining, ctx.vnode_count)
    predecessor = await ctx.snapshots.load_version(local.version)
    if predecessor is None:
        raise predecessor_lost(version)
    if (
        predecessor.draining
        or predecessor.assignment_version != local.version
        or snapshot_fence(predecessor) != transition.predecessor
    ):
        raise CorruptRecord(
            f"draining assignment {version} does not bind the committed predecessor "
            f"{local.version}",
            key=snapshot_path(version),
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )
    if not ctx.controller.process_lease_is_live():
        raise Refused("the local process lease is not live", reason=Refusal.PROCESS_LEASE_NOT_LIVE)
    if await assignment_drain_decision(ctx.authority, version) is not None:
        raise Refused(
            f"draining assignment {version} already has a terminal authority decision",
            reason=Refusal.DRAIN_ALREADY_DECIDED,
        )
    lease = await ctx.authority.load()
    if lease is None or not lease_matches_proof(lease, transition.leader):
        raise Refused(
            f"draining assignment {version}: its leader term was superseded",
            reason=Refusal.DRAIN_LEADER_SUPERSEDED,
        )
    if predecessor.owners != local.owners:
        raise CorruptRecord(
            f"draining assignment {version}: the predecessor's owners differ from the local "
            "registry",
            key=snapshot_path(local.version),
            reason=Refusal.OWNERS_DIFFER,
        )
    return predecessor


async def audit_exact_drain_head(
    ctx: RebalanceContext, draining: AssignmentSnapshot, *, deadline: float
) -> AssignmentSnapshot:
    """The durable head is still exactly `draining`, and its predecessor audit passes."""
    version = draining.assignment_version
    async with within_deadline(ctx.clock, deadline, f"draining assignment {version} audit"):
        head = await ctx.snapshots.load()
        if head != draining:
            raise Refused(
                f"draining assignment {version} is no longer the unfinalized head",
                reason=Refusal.HEAD_MOVED,
            )
        return await audit_drain_predecessor(ctx, draining)


def local_drain_participant(
    ctx: RebalanceContext, transition: AssignmentDrainTransition
) -> FenceParticipant | None:
    """This exact process when it is a predecessor participant of `transition`."""
    me = ctx.me
    if transition.predecessor.participant_incarnation(me.node_id) == me.boot_incarnation:
        return me
    return None
