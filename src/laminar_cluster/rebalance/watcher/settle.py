"""Follower-side drain settlement and the watcher's exact-edge helpers (RB §4.11,
RB §4.13; RB-4, RB-11, RB-12).

A follower that acknowledged a drain (or that is a predecessor participant of an audited drain
terminal) must apply the terminal's verdict to its own sources: Commit releases the partitions
moving away at the prepared cut, Abort resumes them. It does so only at exactly the target
generation with identical owners (RB-11), and holds intake closed until it has (RB-12).

Every function takes the watcher's `WatcherState` and mutates only it; durable effects go
through the engine and controller.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.assignment.model import validate_snapshot
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import CorruptRecord, DeadlineExceeded, LaminarError, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.drain import audit_exact_drain_head, local_drain_participant
from laminar_cluster.rebalance.audit.generation import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority, AuditedDrainOutcome
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import suspend_local_assignment_authority
from laminar_cluster.rebalance.interfaces import EngineState, RegistrySnapshot
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.watcher.state import WatcherState

logger: Final = logging.getLogger(__name__)

# What a watcher step treats as "this step failed; log, fail closed and retry next tick".
STEP_FAILURES: Final = (LaminarError, ShapeViolation)


@asynccontextmanager
async def adoption_lock(ctx: RebalanceContext, deadline: float, what: str) -> AsyncIterator[None]:
    """Hold the engine's adoption lock; the wait (only) is bounded by `deadline`."""
    try:
        async with within_deadline(ctx.clock, deadline, what):
            await ctx.engine.adoption_lock.acquire()
    except DeadlineExceeded as error:
        raise DeadlineExceeded(f"timed out serializing {what}") from error
    try:
        yield
    finally:
        ctx.engine.adoption_lock.release()


async def install_checkpoint_drain_transition(
    ctx: RebalanceContext,
    draining: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
    predecessor: AssignmentSnapshot,
    *,
    deadline: float,
) -> AssignmentSnapshot:
    """RB §4.11: install `transition` in the controller under the adoption lock, after re-auditing
    that `draining` is still the exact unfinalized head; returns the audited predecessor.

    Installing under the lock means a checkpoint admitted later sees the drain, and one admitted
    earlier already prepared against the predecessor (RB §4.4 step 4.6)."""
    if ctx.controller.checkpoint_drain_transition() == transition:
        return predecessor
    async with adoption_lock(ctx, deadline, "drain transition installation"):
        predecessor = await audit_exact_drain_head(ctx, draining, deadline=deadline)
        ctx.engine.validate_source_drain_snapshot(draining)
        installed = ctx.controller.checkpoint_drain_transition()
        if installed is None:
            ctx.controller.publish_checkpoint_drain_transition(transition)
        elif installed != transition:
            raise Refused(
                f"draining assignment {draining.assignment_version}: conflicting local "
                "source-drain transition",
                reason=Refusal.TRANSITION_DIFFERS,
            )
    return predecessor


async def ensure_current_assignment_authority_cached(
    ctx: RebalanceContext,
    state: WatcherState,
    audited_successor: AuditedAssignmentAuthority,
    *,
    deadline: float,
) -> None:
    """RB §4.11: cache the exact committed snapshot at the local version, which must be the
    audited successor's retained predecessor, so publication keeps the predecessor authority
    while the successor cannot be adopted yet (RB-11)."""
    local = ctx.engine.registry()
    expected = audited_successor.retained_predecessor(local.version)
    cached = state.durable_snapshot
    if cached is not None and exact_committed_fence(cached, local) == expected:
        return
    async with within_deadline(ctx.clock, deadline, f"assignment {local.version} re-audit"):
        snapshot = await ctx.snapshots.load_version(local.version)
    if snapshot is None:
        raise Refused(
            f"committed assignment {local.version} is missing from the store",
            reason=Refusal.PREDECESSOR_LOST,
        )
    if exact_committed_fence(snapshot, local) != expected:
        raise CorruptRecord(
            f"committed assignment {local.version} is not the audited successor's exact "
            "retained predecessor",
            key=snapshot_path(local.version),
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )
    state.cache(snapshot)


def exact_committed_fence(
    snapshot: AssignmentSnapshot, local: RegistrySnapshot
) -> CheckpointAssignmentFence | None:
    """The fence of `snapshot` when it is committed, canonical, and exactly what the local
    registry runs (same version, same owners); None otherwise."""
    if (
        snapshot.draining
        or snapshot.assignment_version != local.version
        or snapshot.owners != local.owners
    ):
        return None
    try:
        return validate_snapshot(snapshot)
    except ShapeViolation:
        return None


def _terminal_transition(
    ctx: RebalanceContext, state: WatcherState, audited_terminal: AuditedDrainOutcome | None
) -> AssignmentDrainTransition | None:
    """The drain this process settles: its active one, else an audited one it took part in."""
    transition = state.active_local_drain
    if (
        transition is None
        and audited_terminal is not None
        and local_drain_participant(ctx, audited_terminal.transition) is not None
    ):
        transition = audited_terminal.transition
    return transition


async def settle_terminal_drain(
    ctx: RebalanceContext,
    state: WatcherState,
    snapshot: AssignmentSnapshot,
    audited_terminal: AuditedDrainOutcome | None,
    *,
    deadline: float,
    revision: int,
) -> tuple[bool, int]:
    """RB §4.13 for the committed head `snapshot`: (False, _) skips the rest of the tick; the
    second value is the authority revision the tick continues with."""
    transition = _terminal_transition(ctx, state, audited_terminal)
    if transition is None:
        state.terminal_resolution_hold = None
        return True, revision
    audited = (
        audited_terminal
        if audited_terminal is not None and audited_terminal.transition == transition
        else None
    )
    round_id = drain_id(transition)
    if audited is not None and _stopped_recovery_owns_round(ctx, transition, round_id):
        # Those source tasks are gone; the replacement generation resolves before Release.
        state.clear_active_drain()
        return True, revision
    if audited is not None:
        try:
            resolved = ctx.engine.owned_source_drain_resolved(round_id, audited.outcome)
        except STEP_FAILURES as error:
            state.dirty = True
            try:
                await hold_terminal_source_resolution(ctx, state, round_id, deadline=deadline)
            except STEP_FAILURES as hold_error:
                logger.warning("drain %s: holding intake failed: %s", round_id, hold_error)
            logger.warning("drain %s: source resolution state unreadable: %s", round_id, error)
            return False, revision
        if resolved:
            state.clear_active_drain()
            return True, revision
    state.dirty = True
    try:
        revision = await hold_terminal_source_resolution(ctx, state, round_id, deadline=deadline)
    except STEP_FAILURES as error:
        logger.warning("drain %s: holding intake for source resolution failed: %s", round_id, error)
        return False, revision
    try:
        settled = await settle_observed_local_drain(
            ctx, transition, snapshot, audited, adoption_deadline=deadline
        )
    except STEP_FAILURES as error:
        logger.warning("drain %s: local source resolution failed: %s", round_id, error)
        return False, revision
    if not settled:
        return False, revision
    state.clear_active_drain()
    return True, ctx.engine.authority_revision()


def _stopped_recovery_owns_round(
    ctx: RebalanceContext, transition: AssignmentDrainTransition, round_id: AssignmentDrainId
) -> bool:
    """RB §4.13 step 3: coordinated recovery stopped this round's source tasks."""
    engine = ctx.engine
    return (
        engine.stopped_terminal_round(transition.predecessor) == round_id
        and engine.state() is EngineState.CREATED
        and engine.runtime_cancelled()
        and engine.cluster_intake_fenced()
        and engine.coordinated_recovery_in_progress()
    )


async def hold_terminal_source_resolution(
    ctx: RebalanceContext, state: WatcherState, round_id: AssignmentDrainId, *, deadline: float
) -> int:
    """RB §4.13: keep authority suspended while the terminal's source resolution is pending;
    returns the authority revision. Idempotent while nothing reopened authority since."""
    engine, controller = ctx.engine, ctx.controller
    revision = engine.authority_revision()
    if (
        state.terminal_resolution_hold == (round_id, revision)
        and engine.cluster_intake_fenced()
        and controller.certify_owner_map(round_id.predecessor_version) is None
        and controller.certify_owner_map(round_id.target_version) is None
    ):
        return revision
    await suspend_local_assignment_authority(ctx, deadline=deadline)
    revision = engine.authority_revision()
    state.terminal_resolution_hold = (round_id, revision)
    return revision


async def settle_observed_local_drain(
    ctx: RebalanceContext,
    transition: AssignmentDrainTransition,
    observed: AssignmentSnapshot,
    audited: AuditedDrainOutcome | None,
    *,
    adoption_deadline: float,
    drain_deadline: float | None = None,
) -> bool:
    """RB §4.13: resolve the local source drain of `transition` once `observed` shows its
    terminal. False while the drain is still open; True once resolved at exactly the target
    generation with identical owners (RB-11). `drain_deadline` None means a fresh
    `drain_ack_timeout` when the resolution starts. Refused when the durable terminal does not
    settle this drain (DRAIN_SUPERSEDED, TERMINAL_PRUNED) or the local registry is not exactly
    the terminal (NOT_AT_TERMINAL)."""
    target_version = transition.target.assignment_version
    if observed.draining:
        if observed.drain_transition == transition:
            return False
        if observed.assignment_version >= target_version:
            raise Refused(
                f"local drain to assignment {target_version} was superseded by a different "
                f"draining assignment {observed.assignment_version}",
                reason=Refusal.DRAIN_SUPERSEDED,
            )
        return False
    if observed.assignment_version < target_version:
        return False
    finalized, audited = await _audited_terminal(
        ctx, transition, observed, audited, deadline=adoption_deadline
    )
    engine = ctx.engine
    if engine.registry().version < target_version:
        await engine.adopt_assignment(finalized, deadline=adoption_deadline)
    local = engine.registry()
    if local.version != target_version or local.owners != finalized.owners:
        raise Refused(
            f"local assignment {local.version} is not exactly the drain terminal "
            f"{target_version}; the source drain stays unresolved",
            reason=Refusal.NOT_AT_TERMINAL,
        )
    if drain_deadline is None:
        drain_deadline = ctx.deadline_in(ctx.config.drain_ack_timeout_s)
    await engine.resolve_local_source_drain(
        drain_id(transition), audited.outcome, deadline=drain_deadline
    )
    return True


async def _audited_terminal(
    ctx: RebalanceContext,
    transition: AssignmentDrainTransition,
    observed: AssignmentSnapshot,
    audited: AuditedDrainOutcome | None,
    *,
    deadline: float,
) -> tuple[AssignmentSnapshot, AuditedDrainOutcome]:
    """The committed terminal at `transition`'s target (`observed` itself, or loaded when the
    head moved past it) and its audit, which must settle exactly `transition`."""
    target_version = transition.target.assignment_version
    finalized = observed
    if observed.assignment_version != target_version:
        async with within_deadline(ctx.clock, deadline, "drain terminal load"):
            loaded = await ctx.snapshots.load_version(target_version)
        if loaded is None:
            raise Refused(
                f"drain terminal {target_version} was pruned before local drain resolution",
                reason=Refusal.TERMINAL_PRUNED,
            )
        finalized, audited = loaded, None
    if audited is None or audited.transition != transition:
        authority = await audit_snapshot_authority_outcome(ctx, finalized, deadline=deadline)
        if authority.terminal is None:
            raise Refused(
                f"drain terminal {target_version}: lost drain transition history",
                reason=Refusal.DRAIN_SUPERSEDED,
            )
        audited = authority.terminal
    if audited.transition != transition:
        raise Refused(
            f"drain terminal {target_version} resolves a different transition than the local drain",
            reason=Refusal.DRAIN_SUPERSEDED,
        )
    return finalized, audited
