"""Deciding and materializing a drain's terminal (RB §4.8; RB-5, RB-19, RB-6, RB-8, RB-15).

The decision is recorded in the leader authority first (first writer wins per target version;
a losing request adopts the winner's verdict), then exactly one terminal object is created at
the draining version. Neither write is bounded by a deadline once started (RB §4.19): abandoning
them could leave a decided but unmaterialized drain, which the next attempt would only redo.
Only the lock wait is bounded.

Errors: no live leader proof is Fenced (and a Fenced from the authority keeps its type); live
finalization while recovering is Refused (YIELDED_TO_RECOVERY), as is a stopped recovery that
meets a Commit winner (COMMIT_WINNER); a decision or terminal that contradicts the draining
snapshot is CorruptRecord; wrong arguments are InvalidArgument.
"""

from __future__ import annotations

import enum
import logging
from typing import Final

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.model import (
    aborted_target,
    committed_target,
    snapshot_fence,
)
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import Conflict
from laminar_cluster.authority.assignment_decisions import (
    DecisionConflict,
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    LaminarError,
    Refused,
    restated,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentVerdict,
)
from laminar_cluster.rebalance.audit.binding import assignment_binds_local_process
from laminar_cluster.rebalance.audit.drain import finalized_drain_outcome, local_drain_participant
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.history import prune_after
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal

logger: Final = logging.getLogger(__name__)
# Decision record and finalize object are not abandoned once started (RB §4.19); this bound only
# stops a store that never answers from hanging the controller forever.
_UNBOUNDED_WRITE_S: Final = 3600.0


class FinalizeMode(enum.Enum):
    LIVE = "live"
    # After coordinated recovery stopped the whole predecessor roster: topology only, Abort only.
    STOPPED_RECOVERY = "stopped_recovery"


async def finalize_drain_snapshot(
    ctx: RebalanceContext,
    draining: AssignmentSnapshot,
    predecessor: AssignmentSnapshot,
    requested: SourceDrainOutcome,
    handoff: RecoveryCapsuleRef | None,
    mode: FinalizeMode,
) -> int:
    """Decide and materialize the terminal of `draining`; returns its version (RB §4.8)."""
    if mode is FinalizeMode.STOPPED_RECOVERY and (
        requested is not SourceDrainOutcome.ABORT or handoff is not None
    ):
        raise InvalidArgument("stopped recovery can only abort a drain, without a handoff")
    deadline = ctx.head_deadline()
    if mode is FinalizeMode.LIVE:
        try:
            async with within_deadline(ctx.clock, deadline, "drain finalization lock"):
                await ctx.engine.adoption_lock.acquire()
        except DeadlineExceeded as error:
            raise DeadlineExceeded("timed out serializing live drain finalization") from error
        try:
            if ctx.controller.is_recovering():
                raise Refused(
                    "live source-drain finalization yielded to coordinated recovery authority",
                    reason=Refusal.YIELDED_TO_RECOVERY,
                )
            durable, transition, outcome, proof = await _decide_and_materialize(
                ctx, draining, predecessor, requested, handoff, mode
            )
        finally:
            ctx.engine.adoption_lock.release()
    else:
        durable, transition, outcome, proof = await _decide_and_materialize(
            ctx, draining, predecessor, requested, handoff, mode
        )
    version = durable.assignment_version
    if mode is FinalizeMode.LIVE:
        await _adopt_locally(ctx, durable, transition, outcome)
    clear_settled_source_drain(ctx, transition)
    await prune_after(ctx, version, proof)
    return version


async def _decide_and_materialize(
    ctx: RebalanceContext,
    draining: AssignmentSnapshot,
    predecessor: AssignmentSnapshot,
    requested: SourceDrainOutcome,
    handoff: RecoveryCapsuleRef | None,
    mode: FinalizeMode,
) -> tuple[AssignmentSnapshot, AssignmentDrainTransition, SourceDrainOutcome, object]:
    version = draining.assignment_version
    transition, decision, proof = await _decide(ctx, draining, predecessor, requested, handoff)
    winner = SourceDrainOutcome(decision.verdict.value)
    if mode is FinalizeMode.STOPPED_RECOVERY and winner is not SourceDrainOutcome.ABORT:
        raise Refused(
            "stopped recovery cannot materialize the Commit authority winner for assignment "
            f"{transition.target.assignment_version}; the round must yield",
            reason=Refusal.COMMIT_WINNER,
        )
    now_ms = ctx.clock.wall_ms()
    try:
        proposal = (
            committed_target(draining, now_ms=now_ms)
            if winner is SourceDrainOutcome.COMMIT
            else aborted_target(draining, predecessor, now_ms=now_ms)
        )
    except ShapeViolation as error:
        raise CorruptRecord(
            f"drain terminal cannot be built: {error}", key=snapshot_path(version)
        ) from error
    result = await ctx.snapshots.finalize_drain(draining, proposal, decision)
    durable = result.winner if isinstance(result, Conflict) else proposal
    if durable is None:
        raise Refused(
            f"assignment {version}: the drain terminal was pruned under us",
            reason=Refusal.TERMINAL_PRUNED,
        )
    outcome = finalized_drain_outcome(transition, durable)
    if outcome is not winner:
        raise CorruptRecord(
            f"assignment {transition.target.assignment_version}: materialized {outcome.value} "
            f"contradicts the authority verdict {winner.value}",
            key=snapshot_path(version),
            reason=Refusal.TERMINAL_MISMATCH,
        )
    return durable, transition, outcome, proof


async def _decide(
    ctx: RebalanceContext,
    draining: AssignmentSnapshot,
    predecessor: AssignmentSnapshot,
    requested: SourceDrainOutcome,
    handoff: RecoveryCapsuleRef | None,
) -> tuple[AssignmentDrainTransition, AssignmentDrainDecision, LeaderProof]:
    """RB §4.8 steps 3-6: record the requested verdict, or obey the winner already recorded."""
    transition = draining.drain_transition
    version = draining.assignment_version
    if transition is None or snapshot_fence(predecessor) != transition.predecessor:
        raise InvalidArgument(
            f"assignment {version}: finalization needs the draining snapshot and its exact "
            "predecessor"
        )
    proof = ctx.controller.capture_leader_proof()
    if proof is None:
        raise Fenced("drain finalization requires a live leader proof")
    if (requested is SourceDrainOutcome.COMMIT) != (handoff is not None):
        raise InvalidArgument(
            "a drain commit requires its handoff checkpoint"
            if handoff is None
            else "a drain abort carries no handoff checkpoint"
        )
    verdict = AssignmentVerdict(requested.value)
    try:
        request = new_drain_decision(transition, proof, verdict, handoff)
    except LaminarError as error:
        raise restated(error, f"drain decision refused: {error}") from error
    recorded = await record_assignment_drain_decision(
        ctx.authority, proof, request, deadline=ctx.deadline_in(_UNBOUNDED_WRITE_S)
    )
    decision = recorded.winner if isinstance(recorded, DecisionConflict) else recorded.decision
    if isinstance(recorded, DecisionConflict):
        logger.info(
            "assignment %d: drain decision %s lost to the existing %s winner",
            transition.target.assignment_version,
            verdict.value,
            decision.verdict.value,
        )
    if decision.transition != transition:
        raise CorruptRecord(
            "the drain decision winner names a different transition",
            key=snapshot_path(version),
            reason=Refusal.DECISION_MISMATCH,
        )
    return transition, decision, proof


async def _adopt_locally(
    ctx: RebalanceContext,
    durable: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
    outcome: SourceDrainOutcome,
) -> None:
    """RB §4.8 step 12: the leader runs the terminal and resolves its own source drain."""
    if not assignment_binds_local_process(durable, ctx.me):
        logger.info(
            "assignment %d: terminal names a predecessor process; local adoption waits for a "
            "recovery successor",
            durable.assignment_version,
        )
        return
    await ctx.engine.adopt_assignment(durable, deadline=ctx.head_deadline())
    if local_drain_participant(ctx, transition) is not None:
        await ctx.engine.resolve_local_source_drain(
            drain_id(transition),
            outcome,
            deadline=ctx.deadline_in(ctx.config.drain_ack_timeout_s),
        )


def clear_settled_source_drain(
    ctx: RebalanceContext, transition: AssignmentDrainTransition
) -> None:
    """RB §4.8 step 13: clear our installed transition if it is this one."""
    installed = ctx.controller.checkpoint_drain_transition()
    if installed is None:
        return
    if installed != transition:
        raise Refused(
            "a different source-drain transition is installed locally",
            reason=Refusal.TRANSITION_DIFFERS,
        )
    if not ctx.controller.clear_checkpoint_drain_transition_if_matches(transition):
        raise Refused(
            "the settled source-drain transition could not be cleared",
            reason=Refusal.TRANSITION_DIFFERS,
        )
