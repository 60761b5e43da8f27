"""Coordinated-recovery hooks (RB §1.3, RB §4.18; RB-4, RB-19, RB-15).

Coordinated recovery calls two hooks on a drain whose ack quorum was missed:

* after its stop quorum (the complete predecessor roster is stopped or fenced),
  `settle_stopped_source_drain_after_recovery_quorum` materializes the drain's Abort in
  `StoppedRecovery` mode (topology only, never Commit), or idempotently reconciles a terminal
  that is already durable. Source resolution is deferred: the stopped source tasks are gone.
* before Release, `settle_source_drain_before_recovery_release` re-applies the durable
  terminal verdict to the replacement source tasks of this process.

Both re-read the head and re-audit after every await that could race another writer, and
raise Refused with the spec's wording (RB §9) when anything moved (HEAD_MOVED) or the durable state
is not this round's (NOT_STOPPED_PREDECESSOR, PREDECESSOR_SUPERSEDED, ...): the recovery round
then yields and retries. A terminal whose shape contradicts its own verdict is CorruptRecord;
every bounded read that times out is DeadlineExceeded.
"""

from __future__ import annotations

import logging
from typing import Final

from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.handoff_pins import assignment_handoff_checkpoint
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import CorruptRecord, DeadlineExceeded, InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, fence_is_canonical
from laminar_cluster.rebalance.audit.binding import durable_fence
from laminar_cluster.rebalance.audit.drain import (
    audit_snapshot_authority_outcome,
    local_drain_participant,
)
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority, AuditedDrainOutcome
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.interfaces import EngineState, SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.finalize import (
    FinalizeMode,
    clear_settled_source_drain,
    finalize_drain_snapshot,
)
from laminar_cluster.rebalance.watcher.settle import settle_observed_local_drain

logger: Final = logging.getLogger(__name__)


def stopped_recovery_preconditions_hold(ctx: RebalanceContext) -> bool:
    """RB §4.18: the engine is the stopped, fenced CREATED generation of coordinated recovery,
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
        raise Refused(
            "stopped source-drain settlement requires the exact fenced Created recovery generation",
            reason=Refusal.NOT_STOPPED,
        )
    if not fence_is_canonical(expected_predecessor):
        raise InvalidArgument("stopped source-drain predecessor certificate is not canonical")
    deadline = ctx.head_deadline()
    head = await _load_head(ctx, deadline, "stopped source-drain head read")
    if head is None:
        raise Refused(
            "stopped source-drain settlement has no durable assignment head",
            reason=Refusal.NO_HEAD,
        )
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
    if durable_fence(head) != expected:
        raise Refused(
            "stable source-drain head does not match the stopped recovery predecessor",
            reason=Refusal.NOT_STOPPED_PREDECESSOR,
        )
    await _audit(ctx, head, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain predecessor recheck") != head:
        raise _moved("stopped source-drain predecessor changed during audit")


async def _reconcile_stopped_terminal(
    ctx: RebalanceContext,
    head: AssignmentSnapshot,
    expected: CheckpointAssignmentFence,
    deadline: float,
) -> int:
    """An already-materialized terminal: check it is exactly this drain's, idempotently."""
    target_version = expected.assignment_version + 1
    if head.assignment_version != target_version:
        raise Refused(
            f"stable assignment {head.assignment_version} superseded stopped source-drain "
            f"predecessor {expected.assignment_version}",
            reason=Refusal.PREDECESSOR_SUPERSEDED,
        )
    terminal = await _audited_terminal(ctx, head, deadline)
    transition = terminal.transition
    if transition.predecessor != expected or transition.target.assignment_version != target_version:
        raise Refused(
            f"stable assignment {head.assignment_version} is not an exact terminal for stopped "
            f"predecessor {expected.assignment_version}",
            reason=Refusal.NOT_STOPPED_PREDECESSOR,
        )
    predecessor = await _frozen_predecessor(ctx, expected, deadline)
    handoff = await _check_terminal_shape(ctx, head, predecessor, terminal, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain terminal recheck") != head:
        raise _moved("stopped source-drain terminal changed during reconciliation")
    if await _audited_terminal(ctx, head, deadline) != terminal:
        raise _moved("stopped source-drain terminal authority changed during reconciliation")
    if handoff is not None and await _pin(ctx, head, deadline) != handoff:
        raise Refused(
            "stable source-drain Commit handoff pin changed during reconciliation",
            reason=Refusal.HANDOFF_PIN_LOST,
        )
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
    target_fence = durable_fence(head)
    key = snapshot_path(head.assignment_version)
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
            raise CorruptRecord(
                "stable source-drain Abort does not retain the exact stopped predecessor topology",
                key=key,
                reason=Refusal.TERMINAL_MISMATCH,
            )
        return None
    if target_fence != terminal.transition.target:
        raise CorruptRecord(
            "stable source-drain Commit does not materialize its exact target fence",
            key=key,
            reason=Refusal.TERMINAL_MISMATCH,
        )
    handoff = terminal.committed_handoff_checkpoint()
    if handoff is None:
        raise CorruptRecord(
            "stable source-drain Commit has no exact handoff checkpoint",
            key=key,
            reason=Refusal.TERMINAL_MISMATCH,
        )
    if await _pin(ctx, head, deadline) != handoff:
        raise Refused(
            "stable source-drain Commit no longer retains its exact active handoff checkpoint pin",
            reason=Refusal.HANDOFF_PIN_LOST,
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
        raise Refused(
            f"draining assignment {head.assignment_version} does not bind the stopped recovery "
            f"predecessor {expected.assignment_version}",
            reason=Refusal.NOT_STOPPED_PREDECESSOR,
        )
    installed = ctx.controller.checkpoint_drain_transition()
    if installed is not None and installed != transition:
        raise Refused(
            "durable and locally published source-drain transitions differ",
            reason=Refusal.TRANSITION_DIFFERS,
        )
    predecessor = await _frozen_predecessor(ctx, expected, deadline)
    if await _load_head(ctx, deadline, "stopped source-drain head recheck") != head:
        raise _moved("stopped source-drain head changed during settlement")
    return await finalize_drain_snapshot(
        ctx, head, predecessor, SourceDrainOutcome.ABORT, None, FinalizeMode.STOPPED_RECOVERY
    )


async def settle_source_drain_before_recovery_release(
    ctx: RebalanceContext, expected_fence: CheckpointAssignmentFence, *, deadline: float
) -> int | None:
    """Re-apply the durable drain terminal at `expected_fence` to this process's replacement
    source tasks before Release (RB §4.18); the terminal version, or None when there is nothing
    to resolve here. Idempotent; the caller keeps recovery and intake fenced until it returns."""
    controller = ctx.controller
    if not controller.is_recovering() or not ctx.engine.cluster_intake_fenced():
        raise Refused(
            "recovery source-drain settlement requires closed intake", reason=Refusal.INTAKE_OPEN
        )
    installed = controller.checkpoint_drain_transition()
    head = await _load_head(ctx, deadline, "recovery source-drain head read")
    if head is None:
        raise Refused(
            "recovery source-drain settlement has no assignment head", reason=Refusal.NO_HEAD
        )
    version = head.assignment_version
    if head.draining:
        raise Refused(
            f"recovery Release reached unresolved draining assignment {version}",
            reason=Refusal.RELEASE_ON_DRAINING_HEAD,
        )
    if durable_fence(head) != expected_fence:
        raise _moved(f"recovery assignment {version} changed before source-drain settlement")
    terminal = (await _audit(ctx, head, deadline)).terminal
    if terminal is None:
        if installed is not None:
            raise Refused(
                "process-local source drain has no durable terminal",
                reason=Refusal.DRAIN_SUPERSEDED,
            )
        return None
    transition = terminal.transition
    if installed is not None and installed != transition:
        raise Refused(
            "process-local source drain conflicts with the durable terminal",
            reason=Refusal.TRANSITION_DIFFERS,
        )
    if local_drain_participant(ctx, transition) is None:
        clear_settled_source_drain(ctx, transition)
        return None
    if ctx.clock.monotonic() >= deadline:
        raise DeadlineExceeded("recovery source-drain settlement deadline expired")
    settled = await settle_observed_local_drain(
        ctx, transition, head, terminal, adoption_deadline=deadline, drain_deadline=deadline
    )
    if not settled:
        raise Refused(
            "materialized source drain was not ready for recovery Release",
            reason=Refusal.NOT_AT_TERMINAL,
        )
    if await _load_head(ctx, deadline, "recovery source-drain head recheck") != head:
        raise _moved("recovery source-drain assignment changed during settlement")
    if (await _audit(ctx, head, deadline)).terminal != terminal:
        raise _moved("recovery source-drain terminal changed during settlement")
    clear_settled_source_drain(ctx, transition)
    return version


# -- bounded reads ---------------------------------------------------------------------------
async def _load_head(
    ctx: RebalanceContext, deadline: float, what: str
) -> AssignmentSnapshot | None:
    try:
        async with within_deadline(ctx.clock, deadline, what):
            return await ctx.snapshots.load()
    except DeadlineExceeded as error:
        raise DeadlineExceeded(f"{what} timed out") from error


async def _audit(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, deadline: float
) -> AuditedAssignmentAuthority:
    try:
        return await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    except DeadlineExceeded as error:
        raise DeadlineExceeded(
            f"assignment {snapshot.assignment_version} authority audit timed out"
        ) from error


async def _audited_terminal(
    ctx: RebalanceContext, head: AssignmentSnapshot, deadline: float
) -> AuditedDrainOutcome:
    terminal = (await _audit(ctx, head, deadline)).terminal
    if terminal is None:
        raise Refused(
            f"stable assignment {head.assignment_version} is not an authority-sequenced drain "
            "terminal",
            reason=Refusal.PREDECESSOR_SUPERSEDED,
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
        raise DeadlineExceeded("stopped source-drain predecessor read timed out") from error
    if predecessor is None:
        raise Refused(
            f"source-drain predecessor assignment {version} is unavailable after stop quorum",
            reason=Refusal.PREDECESSOR_LOST,
        )
    if predecessor.draining or durable_fence(predecessor) != expected:
        raise Refused(
            "stopped source-drain predecessor no longer matches the frozen round",
            reason=Refusal.NOT_STOPPED_PREDECESSOR,
        )
    return predecessor


async def _pin(
    ctx: RebalanceContext, head: AssignmentSnapshot, deadline: float
) -> RecoveryCapsuleRef | None:
    try:
        async with within_deadline(ctx.clock, deadline, "stopped source-drain handoff pin read"):
            return await assignment_handoff_checkpoint(ctx.authority, durable_fence(head))
    except DeadlineExceeded as error:
        raise DeadlineExceeded("stopped source-drain Commit handoff-pin read timed out") from error


def _moved(message: str) -> Refused:
    """The head, a terminal or its authority changed between two reads: the round retries."""
    return Refused(message, reason=Refusal.HEAD_MOVED)
