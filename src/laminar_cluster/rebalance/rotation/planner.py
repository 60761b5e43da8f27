"""`try_rebalance`: the leader's decision procedure (spec_rebalance §4.3).

One attempt: audit the durable head, settle whatever a crashed leader left (orphan drain,
pending recovery decision, lagging adoption), then plan the rendezvous target over the
admitted successor processes and take the graceful path when every predecessor owner can
certify its source cut, the recovery path otherwise. Returns the settled version, or None
when there is nothing to do (or the attempt is deferred).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from laminar_cluster.assignment.model import next_for_participants, to_vnode_vec
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import (
    rendezvous_assignment,
    retain_recovery_predecessors,
    successor_participants,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, LaminarError
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.audit.binding import assignment_binds_local_process
from laminar_cluster.rebalance.audit.drain import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import suspend_local_assignment_authority
from laminar_cluster.rebalance.interfaces import EngineState, RebalanceError, SourceDrainOutcome
from laminar_cluster.rebalance.recovery import recover as recovery
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.rotation.graceful import execute_graceful_rotation

logger: Final = logging.getLogger(__name__)
_CERTIFYING_STATES: Final = frozenset({"active", "draining"})


def owners_of(snapshot: AssignmentSnapshot, vnode_count: int) -> list[int]:
    try:
        return to_vnode_vec(snapshot, vnode_count)
    except ShapeViolation as error:
        raise RebalanceError(f"assignment {snapshot.assignment_version}: {error}") from error


async def try_rebalance(ctx: RebalanceContext, live: Sequence[int]) -> int | None:
    """§4.3 steps 1-17."""
    head_deadline = ctx.head_deadline()
    try:
        async with within_deadline(ctx.clock, head_deadline, "durable assignment head audit"):
            current = await ctx.snapshots.load()
    except DeadlineExceeded as error:
        raise RebalanceError("durable assignment head audit timed out") from error
    if current is None:
        raise RebalanceError("no snapshot on store — boot seed missing")
    try:
        authority = await audit_snapshot_authority_outcome(ctx, current, deadline=head_deadline)
    except DeadlineExceeded as error:
        raise RebalanceError("durable assignment head audit timed out") from error
    if authority.is_recovery:
        await recovery.abort_predecessor_checkpoint_for_recovery(
            ctx, current, deadline=head_deadline
        )
    current_owners = owners_of(current, ctx.vnode_count)
    local = ctx.engine.registry()
    if current.assignment_version < local.version:
        raise RebalanceError(
            f"durable assignment {current.assignment_version} regressed below local "
            f"assignment {local.version}"
        )
    if current.assignment_version == local.version and tuple(current_owners) != local.owners:
        raise RebalanceError(
            f"durable assignment {current.assignment_version} has different owners than the "
            "local registry at the same version"
        )
    successor = authority.propagated_recovery_successor
    may_skip = (
        local.version >= current.assignment_version or ctx.engine.state() is EngineState.FAULTED
    )
    if successor is not None and may_skip:
        settled = await recovery.reconcile_pending_recovery_decision(ctx, current)
        if settled is None:
            raise RebalanceError(
                f"assignment {current.assignment_version} propagated its checkpoint pin to "
                "missing recovery successor"
            )
        if settled != successor.assignment_version:
            raise RebalanceError(
                f"recovery successor materialized at {settled}, expected "
                f"{successor.assignment_version}"
            )
        return settled
    if current.draining:
        return await _abort_orphan_drain(ctx, current)
    if not live:
        return None
    successors, successor_processes = await _admitted_successors(ctx, live)
    if not successors:
        return None
    try:
        roster_is_live = (
            tuple(successor_participants(current_owners, successor_processes))
            == current.participants
        )
    except (InvalidArgument, ShapeViolation, ValueError, RebalanceError):
        roster_is_live = False
    if (
        current.assignment_version > local.version
        and authority.is_recovery
        and assignment_binds_local_process(current, ctx.me)
    ):
        return await recovery.adopt_materialized_recovery_head(ctx, current)
    if current.assignment_version > local.version and roster_is_live:
        await ctx.engine.adopt_assignment(current, deadline=head_deadline)
        adopted = ctx.engine.registry().version
        if adopted < current.assignment_version:
            raise RebalanceError(
                f"lagging local adoption of assignment {current.assignment_version} did not apply"
            )
        return adopted
    pending = await recovery.reconcile_pending_recovery_decision(ctx, current)
    if pending is not None:
        return pending
    return await _plan(ctx, current, current_owners, successors, successor_processes)


async def _abort_orphan_drain(ctx: RebalanceContext, current: AssignmentSnapshot) -> int:
    """§4.3 step 7: a durable drain never stays without an outcome."""
    version = current.assignment_version
    prior = await ctx.snapshots.load_version(version - 1)
    if prior is None:
        raise RebalanceError(f"draining assignment {version} lost committed predecessor")
    if prior.draining:
        raise RebalanceError(f"draining assignment {version} has a draining predecessor")
    await audit_snapshot_authority_outcome(ctx, prior, deadline=ctx.head_deadline())
    owners_of(prior, ctx.vnode_count)
    await suspend_local_assignment_authority(ctx, deadline=ctx.head_deadline())
    return await finalize_drain_snapshot(
        ctx, current, prior, SourceDrainOutcome.ABORT, None, FinalizeMode.LIVE
    )


async def _admitted_successors(
    ctx: RebalanceContext, live: Sequence[int]
) -> tuple[list[int], list[FenceParticipant]]:
    """§4.3 step 9: current boots, still lease owners, admitted (not quarantined)."""
    ids = sorted(set(live))
    controller = ctx.controller
    observed = await controller.available_recovery_participant_incarnations(
        ids, deadline=ctx.head_deadline()
    )
    processes: list[FenceParticipant] = []
    for participant in observed:
        if not await controller.verify_current_process_incarnation(
            participant, deadline=ctx.head_deadline()
        ):
            continue
        if controller.admit_successor_process(participant):
            processes.append(participant)
    return [p.node_id for p in processes], processes


async def predecessor_cut_unavailability(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    current_owners: Sequence[int],
    successors: Sequence[int],
) -> str | None:
    """§4.3 step 15: why some predecessor owner cannot certify its source cut, or None."""
    controller = ctx.controller
    ids = [p.node_id for p in current.participants]
    try:
        roster = await controller.recovery_participant_incarnations(
            ids, deadline=ctx.head_deadline()
        )
    except LaminarError as error:
        return f"roster unavailable: {error}"
    if tuple(roster) != current.participants:
        return "roster changed"
    states = {member.node_id: member.state for member in controller.members_watch().current()}
    for owner in sorted(set(current_owners)):
        if controller.is_unresponsive(owner):
            return f"predecessor owner node-{owner} cannot certify the source cut"
        if owner in successors:
            continue
        if states.get(owner) not in _CERTIFYING_STATES:
            return f"predecessor owner node-{owner} cannot certify the source cut"
    return None


async def _live_draining_predecessors(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    successor_processes: Sequence[FenceParticipant],
) -> list[FenceParticipant]:
    """Predecessor processes that are draining, alive, and still their node's lease owner."""
    controller = ctx.controller
    states = {member.node_id: member.state for member in controller.members_watch().current()}
    candidates = [
        p
        for p in current.participants
        if p not in successor_processes and states.get(p.node_id) == "draining"
    ]
    if not candidates:
        return []
    observed = await controller.available_recovery_participant_incarnations(
        [p.node_id for p in candidates], deadline=ctx.head_deadline()
    )
    live = []
    for participant in observed:
        if participant in candidates and await controller.verify_current_process_incarnation(
            participant, deadline=ctx.head_deadline()
        ):
            live.append(participant)
    return live


async def _plan(
    ctx: RebalanceContext,
    current: AssignmentSnapshot,
    current_owners: list[int],
    successors: list[int],
    successor_processes: list[FenceParticipant],
) -> int | None:
    """§4.3 steps 14-17."""
    new_owners = rendezvous_assignment(ctx.vnode_count, successors)
    participants = list(successor_participants(new_owners, successor_processes))
    roster_changed = tuple(participants) != current.participants
    if new_owners == current_owners and not roster_changed:
        return None
    reason = await predecessor_cut_unavailability(ctx, current, current_owners, successors)
    if reason is None:
        return await execute_graceful_rotation(ctx, current, new_owners, participants)
    # A predecessor that is leaving gracefully (draining, still renewing) is healthy: it keeps
    # a vnode here and drains through a later graceful rotation. Fencing it would fail
    # ("renewed") and stall this recovery until it gave up leaving.
    retained = successor_processes + await _live_draining_predecessors(
        ctx, current, successor_processes
    )
    retain_recovery_predecessors(new_owners, current.participants, retained)
    participants = list(successor_participants(new_owners, retained))
    try:
        proposal = next_for_participants(
            current, new_owners, participants, now_ms=ctx.clock.wall_ms()
        )
    except ShapeViolation as error:
        raise RebalanceError(f"recovery proposal cannot be built: {error}") from error
    decision = await recovery.authorize_recovery_successor(ctx, current, proposal, reason)
    return await recovery.materialize_recovery_decision(
        ctx, decision, timeout_s=ctx.config.checkpoint_timeout_s
    )
