"""Graceful rotation: publish the drain, collect the exact ack quorum, take the pre-rotation
checkpoint and finalize (RB §4.4-§4.7; RB-7, RB-8, RB-9, RB-16).

Errors keep the kind of their cause: a failure of a step after the drain was published is
re-raised as the kind of the error that ended it (`errors.restated`), so a Fenced stays
Fenced up to the controller loop. A missed ack quorum is Refused (ACK_QUORUM_MISSED: the next
attempt runs the stopped-recovery round); a pre-rotation checkpoint that failed keeps its
kind with reason HANDOFF_CHECKPOINT_FAILED.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.model import next_draining
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import Conflict, Rotated, RotateResult
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointVerdict, RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    LaminarError,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
    restated,
)
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.drain import audit_exact_drain_head, local_drain_participant
from laminar_cluster.rebalance.audit.owner_certificate import assignment_vnode_state_is_ready
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import ensure_local_recovery_fault
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot

logger: Final = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Deferred:
    """Nothing was attempted: recovery or a dead proof came first (RB §4.5)."""


@dataclass(frozen=True, slots=True)
class Resolved:
    outcome: RotateResult
    authority_changed: bool


async def execute_graceful_rotation(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    new_owners: Sequence[int],
    participants: Sequence[FenceParticipant],
) -> int | None:
    """RB §4.4: None when deferred, the settled version otherwise (errors: module docstring)."""
    leader = ctx.controller.capture_leader_proof()
    if leader is None:
        raise Fenced("graceful rotation requires a live leader proof")
    try:
        drain = next_draining(current, new_owners, participants, leader, now_ms=ctx.clock.wall_ms())
    except ShapeViolation as error:
        raise InvalidArgument(f"drain snapshot cannot be built: {error}") from error
    transition = drain.drain_transition
    assert transition is not None
    published = await _publish_drain(ctx, current, drain, transition)
    if published is None:
        return None
    if isinstance(published, Conflict):
        winner = published.winner
        if winner is None:
            raise Refused(
                f"assignment {drain.assignment_version} winner was pruned",
                reason=Refusal.HEAD_MOVED,
            )
        from laminar_cluster.rebalance.recovery.recover import adopt_any

        await adopt_any(ctx, winner, deadline=ctx.head_deadline())
        return winner.assignment_version
    return await _run_published_drain(ctx, current, drain, transition)


async def _publish_drain(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    drain: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
) -> RotateResult | None:
    """RB §4.4 step 4: preflight and CAS under the adoption lock; None when deferred."""
    deadline = ctx.head_deadline()
    try:
        async with within_deadline(ctx.clock, deadline, "graceful rotation lock"):
            await ctx.engine.adoption_lock.acquire()
    except DeadlineExceeded as error:
        raise DeadlineExceeded("timed out serializing graceful rotation publication") from error
    try:
        if not await _preflight(ctx, current, transition, deadline):
            return None
        try:
            reconciled = await reconcile_drain_publication(ctx, drain, current.assignment_version)
        except (InvalidArgument, CorruptRecord) as error:
            raise restated(
                error, f"conditional publication failed deterministically: {error}"
            ) from error
        if isinstance(reconciled, Deferred):
            return None
        if reconciled.authority_changed:
            raise Refused(
                f"draining assignment {drain.assignment_version} became durable after "
                "publication authority changed; yielding to durable drain recovery",
                reason=Refusal.PUBLICATION_AUTHORITY_CHANGED,
            )
        if isinstance(reconciled.outcome, Rotated):
            ctx.engine.validate_source_drain_snapshot(drain)
            installed = ctx.controller.checkpoint_drain_transition()
            if installed is None:
                ctx.controller.publish_checkpoint_drain_transition(transition)
            elif installed != transition:
                raise Refused(
                    "a different source-drain transition is already installed locally",
                    reason=Refusal.TRANSITION_DIFFERS,
                )
        return reconciled.outcome
    finally:
        ctx.engine.adoption_lock.release()


async def _preflight(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
    deadline: float,
) -> bool:
    """RB §4.4 steps 4.1-4.4: False defers the rotation to a later attempt."""
    local = ctx.engine.registry()
    if local.version != current.assignment_version or local.owners != current.owners:
        raise Refused(
            f"local assignment {local.version} is not the durable head "
            f"{current.assignment_version}",
            reason=Refusal.ADOPTION_LAGS,
        )
    async with within_deadline(ctx.clock, deadline, "graceful rotation preflight"):
        if not await ctx.engine.local_vnode_state_is_ready(
            transition.predecessor, deadline=deadline
        ):
            return False
        published = ctx.controller.certify_owner_map(current.assignment_version)
        if published is None:
            return False
        if published != transition.predecessor:
            raise Refused(
                f"published fence of assignment {current.assignment_version} does not match "
                "the exact assignment-adoption certificate",
                reason=Refusal.NOT_ADOPTION_CERTIFICATE,
            )
        reported = await ctx.controller.read_adopted_assignments(deadline=deadline)
    return assignment_vnode_state_is_ready(transition.predecessor, reported)


def _authority_changed(ctx: RebalanceContext, transition: AssignmentDrainTransition) -> bool:
    return ctx.controller.is_recovering() or not ctx.controller.proof_is_live(transition.leader)


async def reconcile_drain_publication(
    ctx: RebalanceContext, drain: AssignmentSnapshot, prior_version: int
) -> Resolved | Deferred:
    """RB §4.5, RB-16: no deadline. Once a create may have landed, only its outcome ends the loop,
    so the adoption lock is never released while the drain could still appear."""
    transition = drain.drain_transition
    assert transition is not None
    ambiguous = False
    changed_total = False
    while True:
        changed = _authority_changed(ctx, transition)
        changed_total |= changed
        if changed and not ambiguous:
            return Deferred()
        try:
            outcome = await ctx.snapshots.save_if_version(drain, prior_version)
        except (StoreUnavailable, WriteOutcomeUnknown, DeadlineExceeded) as error:
            ambiguous = True
            changed_total |= _authority_changed(ctx, transition)
            logger.warning(
                "draining assignment %d publication is ambiguous; retrying: %s",
                drain.assignment_version,
                error,
            )
            await ctx.clock.sleep(ctx.config.retry_delay_s)
            continue
        changed_total |= _authority_changed(ctx, transition)
        if isinstance(outcome, Conflict) and outcome.winner == drain:
            outcome = Rotated(drain)
        return Resolved(outcome=outcome, authority_changed=changed_total)


async def _run_published_drain(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    drain: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
) -> int:
    """RB §4.4 step 6: acks, checkpoint, decision, terminal."""
    version = drain.assignment_version
    drain_deadline = ctx.deadline_in(ctx.config.drain_ack_timeout_s)
    acked = True
    participant = local_drain_participant(ctx, transition)
    if participant is not None:
        try:
            await prepare_and_announce_local_drain(
                ctx, drain, transition, participant, deadline=drain_deadline
            )
        except LaminarError as error:
            logger.warning("assignment %d: local drain receipt failed: %s", version, error)
            acked = False
    acked = acked and await await_drain_quorum(ctx, transition, deadline=drain_deadline)
    if not acked:
        reason = "drain ack quorum not reached before timeout"
        try:
            await audit_exact_drain_head(ctx, drain, deadline=ctx.head_deadline())
        except LaminarError as error:
            raise restated(error, f"{reason}; drain is no longer authoritative: {error}") from error
        ctx.controller.request_stopped_recovery(transition)
        try:
            await ensure_local_recovery_fault(ctx, deadline=ctx.head_deadline())
        except LaminarError as error:
            raise restated(
                error, f"{reason}; coordinated recovery request failed: {error}"
            ) from error
        raise Refused(f"{reason}; coordinated recovery requested", reason=Refusal.ACK_QUORUM_MISSED)
    await audit_exact_drain_head(ctx, drain, deadline=ctx.head_deadline())
    try:
        handoff = await pre_rotation_checkpoint(ctx, transition)
    except LaminarError as failure:
        try:
            await audit_exact_drain_head(ctx, drain, deadline=ctx.head_deadline())
        except LaminarError as error:
            raise restated(
                error, f"{failure}; drain is no longer authoritative: {error}"
            ) from error
        try:
            await finalize_drain_snapshot(
                ctx, drain, current, SourceDrainOutcome.ABORT, None, FinalizeMode.LIVE
            )
        except LaminarError as error:
            raise restated(error, f"{failure}; assignment drain abort failed: {error}") from error
        raise
    await audit_exact_drain_head(ctx, drain, deadline=ctx.head_deadline())
    return await finalize_drain_snapshot(
        ctx, drain, current, SourceDrainOutcome.COMMIT, handoff, FinalizeMode.LIVE
    )


async def prepare_and_announce_local_drain(
    ctx: RebalanceContext,
    draining: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
    participant: FenceParticipant,
    *,
    deadline: float,
) -> None:
    """RB §4.6: stop local sources at one cut, re-audit, then write the durable ack."""
    await ctx.engine.prepare_local_source_drain(transition, participant, deadline=deadline)
    await audit_exact_drain_head(ctx, draining, deadline=deadline)
    if ctx.controller.checkpoint_drain_transition() != transition:
        raise Refused(
            "the locally installed drain transition changed before the ack",
            reason=Refusal.TRANSITION_DIFFERS,
        )
    await ctx.controller.announce_drain_ack(transition, deadline=deadline)


async def await_drain_quorum(
    ctx: RebalanceContext, transition: AssignmentDrainTransition, *, deadline: float
) -> bool:
    """Poll the exact predecessor-roster quorum until `deadline` (RB §4.6). Read errors are
    logged and retried; they never count as quorum."""
    clock = ctx.clock
    while True:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return False
        try:
            if await ctx.controller.drain_ack_quorum_reached(transition, deadline=deadline):
                return True
        except LaminarError as error:
            logger.info("drain ack quorum read failed; retrying: %s", error)
        await clock.sleep(min(ctx.config.quorum_poll_s, max(deadline - clock.monotonic(), 0)))


async def pre_rotation_checkpoint(
    ctx: RebalanceContext, transition: AssignmentDrainTransition
) -> RecoveryCapsuleRef:
    """RB §4.7: a complete checkpoint under the predecessor fence, verified in the authority.
    A failed checkpoint keeps its error's kind (reason HANDOFF_CHECKPOINT_FAILED); a committed
    outcome that is not the predecessor's cut is CorruptRecord (HANDOFF_NOT_PREDECESSOR_CUT)."""
    failed = Refusal.HANDOFF_CHECKPOINT_FAILED
    try:
        result = await ctx.engine.checkpoint_until(deadline=ctx.head_deadline())
    except LaminarError as error:
        raise restated(error, f"pre-rotation checkpoint failed: {error}", reason=failed) from error
    if not result.success:
        if result.error is None:
            raise Refused("pre-rotation checkpoint did not commit", reason=failed)
        raise restated(
            result.error, f"pre-rotation checkpoint did not commit: {result.error}", reason=failed
        ) from result.error
    if result.continuation_error is not None:
        raise restated(
            result.continuation_error,
            "pre-rotation checkpoint committed but cannot continue safely: "
            f"{result.continuation_error}",
            reason=failed,
        ) from result.continuation_error
    async with within_deadline(
        ctx.clock, ctx.head_deadline(), "pre-rotation checkpoint outcome read"
    ):
        outcome = await cluster_outcome(ctx.authority, result.epoch)
    what = f"pre-rotation checkpoint {result.epoch}"
    if outcome is None:
        raise CorruptRecord(
            f"{what} outcome disappeared", reason=Refusal.HANDOFF_NOT_PREDECESSOR_CUT
        )
    if (
        outcome.verdict is not CheckpointVerdict.COMMIT
        or outcome.epoch != result.epoch
        or outcome.checkpoint_id != result.checkpoint_id
        or outcome.assignment_fence != transition.predecessor
    ):
        raise CorruptRecord(
            f"{what} does not bind the predecessor cut",
            reason=Refusal.HANDOFF_NOT_PREDECESSOR_CUT,
        )
    if outcome.recovery_capsule is None:
        raise CorruptRecord(
            f"{what} has no committed reference", reason=Refusal.HANDOFF_NOT_PREDECESSOR_CUT
        )
    return outcome.recovery_capsule
