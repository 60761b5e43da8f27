"""Coordinated-recovery hooks (spec_rebalance §1.3, §4.18; S4, S6, S17).

Coordinated recovery calls two hooks on a drain whose ack quorum was missed:

* after its stop quorum (the complete predecessor roster is stopped or fenced),
  `settle_stopped_source_drain_after_recovery_quorum` materializes the drain's Abort in
  `StoppedRecovery` mode (topology only, never Commit), or idempotently reconciles a terminal
  that is already durable. Source resolution is deferred: the stopped source tasks are gone.
* before Release, `settle_source_drain_before_recovery_release` re-applies the durable
  terminal verdict to the replacement source tasks of this process.

Both re-read the head and re-audit after every await that could race another writer, and
raise `RebalanceError` with the spec's wording (§9) when anything moved: the recovery round
then yields and retries.
"""

from __future__ import annotations

import logging
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.handoff_pins import assignment_handoff_checkpoint
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import DeadlineExceeded
from laminar_cluster.fencing import CheckpointAssignmentFence, fence_is_canonical
from laminar_cluster.rebalance.audit.drain import (
    audit_snapshot_authority_outcome,
    local_drain_participant,
)
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority, AuditedDrainOutcome
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.interfaces import EngineState, RebalanceError, SourceDrainOutcome
from laminar_cluster.rebalance.rotation.finalize import (
    FinalizeMode,
    clear_settled_source_drain,
    finalize_drain_snapshot,
)
from laminar_cluster.rebalance.watcher.settle import settle_observed_local_drain

logger: Final = logging.getLogger(__name__)


def stopped_recovery_preconditions_hold(ctx: RebalanceContext) -> bool:
    """§4.18: the engine is the stopped, fenced CREATED generation of coordinated recovery,
    and this process is recovering under a live process lease."""
    engine, controller = ctx.engine, ctx.controller
    return (
        engine.state() is EngineState.CREATED
        and engine.runtime_cancelled()
        and engine.cluster_intake_fenced()
        and engine.coordinated_recovery_in_progress()
        and controller.is_recovering()
        and controller.process_lease_is_live()
    )


async def settle_stopped_source_drain_after_recovery_quorum(
    ctx: RebalanceContext, expected_predecessor: CheckpointAssignmentFence
) -> int | None:
    """Abort the drain from `expected_predecessor` (or reconcile its durable terminal) after
    the stop quorum; the target version, or None when the head is still the predecessor."""
    if not stopped_recovery_preconditions_hold(ctx):
        raise RebalanceError(
            "stopped source-drain settlement requires the exact fenced Created recovery generation"
        )
    if not fence_is_canonical(expected_predecessor):
        raise RebalanceError("stopped source-drain predecessor certificate is not canonical")
    deadline = ctx.head_deadline()
    head = await _load_head(ctx, deadline, "stopped source-drain head read")
    if head is None:
        raise RebalanceError("stopped source-drain settlement has no durable assignment head")
    if head.draining:
        return await _abort_stopped_drain(ctx, head, expected_predecessor, deadline)
    if head.assignment_version == expected_predecessor.assignment_version:
        await _confirm_stable_predecessor(ctx, head, expected_predecessor, deadline)
        return None
    return await _reconcile_stopped_terminal(ctx, head, expected_predecessor, deadline)


async def _confirm_stable_predecessor(
    ctx: RebalanceContext,
    head: AssignmentSnapshot,
    expected: CheckpointAssignmentFence,
    deadline: float,
) -> None:
    """The head is still the predecessor itself: nothing to settle, once it is audited."""
    if _fence(head) != expected:
        raise RebalanceError(
            "stable source-drain head does not match the stopped recovery predecessor"
        )
    await _audit(ctx, head, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain predecessor recheck") != head:
        raise RebalanceError("stopped source-drain predecessor changed during audit")


async def _reconcile_stopped_terminal(
    ctx: RebalanceContext,
    head: AssignmentSnapshot,
    expected: CheckpointAssignmentFence,
    deadline: float,
) -> int:
    """An already-materialized terminal: check it is exactly this drain's, idempotently."""
    target_version = expected.assignment_version + 1
    if head.assignment_version != target_version:
        raise RebalanceError(
            f"stable assignment {head.assignment_version} superseded stopped source-drain "
            f"predecessor {expected.assignment_version}"
        )
    terminal = await _audited_terminal(ctx, head, deadline)
    transition = terminal.transition
    if transition.predecessor != expected or transition.target.assignment_version != target_version:
        raise RebalanceError(
            f"stable assignment {head.assignment_version} is not an exact terminal for stopped "
            f"predecessor {expected.assignment_version}"
        )
    predecessor = await _frozen_predecessor(ctx, expected, deadline)
    handoff = await _check_terminal_shape(ctx, head, predecessor, terminal, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain terminal recheck") != head:
        raise RebalanceError("stopped source-drain terminal changed during reconciliation")
    if await _audited_terminal(ctx, head, deadline) != terminal:
        raise RebalanceError(
            "stopped source-drain terminal authority changed during reconciliation"
        )
    if handoff is not None and await _pin(ctx, head, deadline) != handoff:
        raise RebalanceError("stable source-drain Commit handoff pin changed during reconciliation")
    clear_settled_source_drain(ctx, transition)
    return target_version


async def _check_terminal_shape(
    ctx: RebalanceContext,
    head: AssignmentSnapshot,
    predecessor: AssignmentSnapshot,
    terminal: AuditedDrainOutcome,
    deadline: float,
) -> RecoveryCapsuleRef | None:
    """Abort: the exact predecessor topology at the target version. Commit: the exact target
    with its handoff checkpoint still pinned; returns that handoff (None for Abort)."""
    target_fence = _fence(head)
    expected = terminal.transition.predecessor
    if terminal.outcome is SourceDrainOutcome.ABORT:
        if (
            head.owners != predecessor.owners
            or head.participants != predecessor.participants
            or target_fence.assignment_version != expected.assignment_version + 1
            or target_fence.vnode_count != expected.vnode_count
            or target_fence.assignment_digest != expected.assignment_digest
            or target_fence.participants != expected.participants
        ):
            raise RebalanceError(
                "stable source-drain Abort does not retain the exact stopped predecessor topology"
            )
        return None
    if target_fence != terminal.transition.target:
        raise RebalanceError(
            "stable source-drain Commit does not materialize its exact target fence"
        )
    handoff = terminal.committed_handoff_checkpoint()
    if handoff is None:
        raise RebalanceError("stable source-drain Commit has no exact handoff checkpoint")
    if await _pin(ctx, head, deadline) != handoff:
        raise RebalanceError(
            "stable source-drain Commit no longer retains its exact active handoff checkpoint pin"
        )
    return handoff


async def _abort_stopped_drain(
    ctx: RebalanceContext,
    head: AssignmentSnapshot,
    expected: CheckpointAssignmentFence,
    deadline: float,
) -> int:
    """A still-draining head: materialize its Abort in StoppedRecovery mode."""
    transition = head.drain_transition
    target_version = expected.assignment_version + 1
    if (
        transition is None
        or transition.predecessor != expected
        or transition.target.assignment_version != target_version
        or head.assignment_version != target_version
    ):
        raise RebalanceError(
            f"draining assignment {head.assignment_version} does not bind the stopped recovery "
            f"predecessor {expected.assignment_version}"
        )
    installed = ctx.controller.checkpoint_drain_transition()
    if installed is not None and installed != transition:
        raise RebalanceError("durable and locally published source-drain transitions differ")
    predecessor = await _frozen_predecessor(ctx, expected, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain head recheck") != head:
        raise RebalanceError("stopped source-drain head changed during settlement")
    return await finalize_drain_snapshot(
        ctx, head, predecessor, SourceDrainOutcome.ABORT, None, FinalizeMode.STOPPED_RECOVERY
    )


async def settle_source_drain_before_recovery_release(
    ctx: RebalanceContext, expected_fence: CheckpointAssignmentFence, *, deadline: float
) -> int | None:
    """Re-apply the durable drain terminal at `expected_fence` to this process's replacement
    source tasks before Release (§4.18); the terminal version, or None when there is nothing
    to resolve here. Idempotent; the caller keeps recovery and intake fenced until it returns."""
    controller = ctx.controller
    if not controller.is_recovering() or not ctx.engine.cluster_intake_fenced():
        raise RebalanceError("recovery source-drain settlement requires closed intake")
    installed = controller.checkpoint_drain_transition()
    head = await _load_head(ctx, deadline, "recovery source-drain head read")
    if head is None:
        raise RebalanceError("recovery source-drain settlement has no assignment head")
    version = head.assignment_version
    if head.draining:
        raise RebalanceError(f"recovery Release reached unresolved draining assignment {version}")
    if _fence(head) != expected_fence:
        raise RebalanceError(
            f"recovery assignment {version} changed before source-drain settlement"
        )
    terminal = (await _audit(ctx, head, deadline)).terminal
    if terminal is None:
        if installed is not None:
            raise RebalanceError("process-local source drain has no durable terminal")
        return None
    if installed is not None and installed != terminal.transition:
        raise RebalanceError("process-local source drain conflicts with the durable terminal")
    if local_drain_participant(ctx, terminal.transition) is None:
        clear_settled_source_drain(ctx, terminal.transition)
        return None
    if ctx.clock.monotonic() >= deadline:
        raise RebalanceError("recovery source-drain settlement deadline expired")
    if not await settle_observed_local_drain(
        ctx,
        terminal.transition,
        head,
        terminal,
        adoption_deadline=deadline,
        drain_deadline=deadline,
    ):
        raise RebalanceError("materialized source drain was not ready for recovery Release")
    if await _load_head(ctx, deadline, "recovery source-drain head recheck") != head:
        raise RebalanceError("recovery source-drain assignment changed during settlement")
    if (await _audit(ctx, head, deadline)).terminal != terminal:
        raise RebalanceError("recovery source-drain terminal changed during settlement")
    clear_settled_source_drain(ctx, terminal.transition)
    return version


# -- bounded reads ---------------------------------------------------------------------------
async def _load_head(
    ctx: RebalanceContext, deadline: float, what: str
) -> AssignmentSnapshot | None:
    try:
        async with within_deadline(ctx.clock, deadline, what):
            return await ctx.snapshots.load()
    except DeadlineExceeded as error:
        raise RebalanceError(f"{what} timed out") from error


async def _audit(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, deadline: float
) -> AuditedAssignmentAuthority:
    try:
        return await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    except DeadlineExceeded as error:
        raise RebalanceError(
            f"assignment {snapshot.assignment_version} authority audit timed out"
        ) from error


async def _audited_terminal(
    ctx: RebalanceContext, head: AssignmentSnapshot, deadline: float
) -> AuditedDrainOutcome:
    terminal = (await _audit(ctx, head, deadline)).terminal
    if terminal is None:
        raise RebalanceError(
            f"stable assignment {head.assignment_version} is not an authority-sequenced drain "
            "terminal"
        )
    return terminal


async def _frozen_predecessor(
    ctx: RebalanceContext, expected: CheckpointAssignmentFence, deadline: float
) -> AssignmentSnapshot:
    version = expected.assignment_version
    try:
        async with within_deadline(ctx.clock, deadline, "stopped source-drain predecessor read"):
            predecessor = await ctx.snapshots.load_version(version)
    except DeadlineExceeded as error:
        raise RebalanceError("stopped source-drain predecessor read timed out") from error
    if predecessor is None:
        raise RebalanceError(
            f"source-drain predecessor assignment {version} is unavailable after stop quorum"
        )
    if predecessor.draining or _fence(predecessor) != expected:
        raise RebalanceError("stopped source-drain predecessor no longer matches the frozen round")
    return predecessor


async def _pin(
    ctx: RebalanceContext, head: AssignmentSnapshot, deadline: float
) -> RecoveryCapsuleRef | None:
    try:
        async with within_deadline(ctx.clock, deadline, "stopped source-drain handoff pin read"):
            return await assignment_handoff_checkpoint(ctx.authority, _fence(head))
    except DeadlineExceeded as error:
        raise RebalanceError("stopped source-drain Commit handoff-pin read timed out") from error


def _fence(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence:
    try:
        return snapshot_fence(snapshot)
    except ShapeViolation as error:
        raise RebalanceError(f"assignment {snapshot.assignment_version}: {error}") from error
