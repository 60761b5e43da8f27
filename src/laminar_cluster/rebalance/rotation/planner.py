"""`try_rebalance`: the leader's decision procedure (RB §4.3).

One attempt: audit the durable head, settle whatever a crashed leader left (orphan drain,
pending recovery decision, lagging adoption), then plan the rendezvous target over the
admitted successor processes and take the graceful path when every predecessor owner can
certify its source cut, the recovery path otherwise. Returns the settled version, or None
when there is nothing to do (or the attempt is deferred). Errors are the errors.py kinds
(the controller loop decides by kind, `rebalance.node.loop`): a head below or beside the local
registry is Refused (HEAD_REGRESSED) or CorruptRecord (OWNERS_DIFFER), timeouts are
DeadlineExceeded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from laminar_cluster.assignment.model import next_for_participants, to_vnode_vec
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import (
    rendezvous_assignment,
    retain_recovery_predecessors,
    successor_participants,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation, reading
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    LaminarError,
    Refused,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.rebalance.audit.binding import assignment_binds_local_process
from laminar_cluster.rebalance.audit.generation import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import suspend_local_assignment_authority
from laminar_cluster.rebalance.interfaces import EngineState, RegistrySnapshot, SourceDrainOutcome
from laminar_cluster.rebalance.recovery import recover as recovery
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.rotation.graceful import execute_graceful_rotation

logger: Final = logging.getLogger(__name__)
_CERTIFYING_STATES: Final = frozenset({"active", "draining"})


def owners_of(snapshot: AssignmentSnapshot, vnode_count: int) -> list[int]:
    """The owner of each vnode of the durable `snapshot` (CorruptRecord naming it if malformed)."""
    with reading(snapshot_path(snapshot.assignment_version)):
        return to_vnode_vec(snapshot, vnode_count)


async def try_rebalance(ctx: RebalanceContext, live: Sequence[int]) -> int | None:
    """RB §4.3 steps 1-17. `ctx.attempt.idle` says whether a None meant nothing to do."""
    ctx.attempt.idle = False
    head_deadline = ctx.head_deadline()
    current, authority = await _audited_head(ctx, head_deadline)
    if authority.is_recovery:
        await recovery.abort_predecessor_checkpoint_for_recovery(
            ctx, current, deadline=head_deadline
        )
    current_owners = owners_of(current, ctx.vnode_count)
    local = ctx.engine.registry()
    _require_head_not_behind(current, current_owners, local)
    successor = authority.propagated_recovery_successor
    may_skip = (
        local.version >= current.assignment_version or ctx.engine.state() is EngineState.FAULTED
    )
    if successor is not None and may_skip:
        return await _settle_propagated_successor(ctx, current, successor)
    if current.draining:
        return await _abort_orphan_drain(ctx, current)
    if not live:
        ctx.attempt.idle = True
        return None
    successors, successor_processes = await _admitted_successors(ctx, live)
    if not successors:
        ctx.attempt.idle = True
        return None
    if (
        current.assignment_version > local.version
        and authority.is_recovery
        and assignment_binds_local_process(current, ctx.me)
    ):
        return await recovery.adopt_materialized_recovery_head(ctx, current)
    if current.assignment_version > local.version and _roster_is_live(
        current, current_owners, successor_processes
    ):
        if not authority.is_recovery:  # a recovery generation restores its owners cold
            require_exact_lagging_edge(current, local, ctx.me.node_id)
        await ctx.engine.adopt_assignment(current, deadline=head_deadline)
        adopted = ctx.engine.registry().version
        if adopted < current.assignment_version:
            raise Refused(
                f"lagging local adoption of assignment {current.assignment_version} did not apply",
                reason=Refusal.ADOPTION_LAGS,
            )
        return adopted
    pending = await recovery.reconcile_pending_recovery_decision(ctx, current)
    if pending is not None:
        return pending
    return await _plan(ctx, current, current_owners, successors, successor_processes)


async def _audited_head(
    ctx: RebalanceContext, deadline: float
) -> tuple[AssignmentSnapshot, AuditedAssignmentAuthority]:
    """RB §4.3 steps 1-2: the durable head and its authority audit, bounded by `deadline`."""
    try:
        async with within_deadline(ctx.clock, deadline, "durable assignment head audit"):
            current = await ctx.snapshots.load()
        if current is None:
            raise Refused("no snapshot on store — boot seed missing", reason=Refusal.NO_HEAD)
        authority = await audit_snapshot_authority_outcome(ctx, current, deadline=deadline)
    except DeadlineExceeded as error:
        raise DeadlineExceeded("durable assignment head audit timed out") from error
    return current, authority


def require_exact_lagging_edge(
    current: AssignmentSnapshot, local: RegistrySnapshot, node_id: int
) -> None:
    """RB-11 at RB §4.3 step 12: a lagging committed head that is not a recovery generation is
    adopted only over its exact edge (local + 1) or by a registry that owns no vnode. A registry
    that owns vnodes and lags by more would skip the drains in between: it would keep the state
    of a vnode it owned before them and owns again now, missing what its other owners committed
    meanwhile (the sim's checker 4, seed 6978). Refused NOT_EXACT_SUCCESSOR instead: the
    process stays where it is."""
    if current.assignment_version > local.version + 1 and node_id in local.owners:
        raise Refused(
            f"lagging assignment {current.assignment_version} is not the exact successor of "
            f"local assignment {local.version}, whose vnodes this process still holds",
            reason=Refusal.NOT_EXACT_SUCCESSOR,
        )


def _require_head_not_behind(
    current: AssignmentSnapshot, current_owners: Sequence[int], local: RegistrySnapshot
) -> None:
    """The durable head is not below the local registry, nor another map at its version."""
    version = current.assignment_version
    if version < local.version:
        # A head read before a concurrent local adoption looks like this too: re-read.
        raise Refused(
            f"durable assignment {version} regressed below local assignment {local.version}",
            reason=Refusal.HEAD_REGRESSED,
        )
    if version == local.version and tuple(current_owners) != local.owners:
        raise CorruptRecord(
            f"durable assignment {version} has different owners than the local registry at the "
            "same version",
            key=snapshot_path(version),
            reason=Refusal.OWNERS_DIFFER,
        )


async def _settle_propagated_successor(
    ctx: RebalanceContext, current: AssignmentSnapshot, successor: CheckpointAssignmentFence
) -> int:
    """RB §4.3 step 6: materialize the recovery successor `current`'s pin was propagated to."""
    settled = await recovery.reconcile_pending_recovery_decision(ctx, current)
    if settled is None:
        raise Refused(
            f"assignment {current.assignment_version} propagated its checkpoint pin to "
            "missing recovery successor",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if settled != successor.assignment_version:
        raise Refused(
            f"recovery successor materialized at {settled}, expected "
            f"{successor.assignment_version}",
            reason=Refusal.HEAD_MOVED,
        )
    return settled


def _roster_is_live(
    current: AssignmentSnapshot,
    current_owners: Sequence[int],
    successor_processes: Sequence[FenceParticipant],
) -> bool:
    """The admitted successor processes are exactly `current`'s roster (RB §4.3 step 10)."""
    try:
        return (
            tuple(successor_participants(current_owners, successor_processes))
            == current.participants
        )
    except InvalidArgument:  # a roster process lost its lease-validated identity
        return False


async def _abort_orphan_drain(ctx: RebalanceContext, current: AssignmentSnapshot) -> int:
    """RB §4.3 step 7: a durable drain never stays without an outcome."""
    version = current.assignment_version
    prior = await ctx.snapshots.load_version(version - 1)
    if prior is None:
        raise Refused(
            f"draining assignment {version} lost committed predecessor",
            reason=Refusal.PREDECESSOR_LOST,
        )
    if prior.draining:
        raise CorruptRecord(
            f"draining assignment {version} has a draining predecessor",
            key=snapshot_path(version - 1),
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )
    await audit_snapshot_authority_outcome(ctx, prior, deadline=ctx.head_deadline())
    owners_of(prior, ctx.vnode_count)
    await suspend_local_assignment_authority(ctx, deadline=ctx.head_deadline())
    return await finalize_drain_snapshot(
        ctx, current, prior, SourceDrainOutcome.ABORT, None, FinalizeMode.LIVE
    )


async def _admitted_successors(
    ctx: RebalanceContext, live: Sequence[int]
) -> tuple[list[int], list[FenceParticipant]]:
    """RB §4.3 step 9: current boots, still lease owners, admitted (not quarantined)."""
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
    """RB §4.3 step 15: why some predecessor owner cannot certify its source cut, or None."""
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
    """RB §4.3 steps 14-17."""
    new_owners = rendezvous_assignment(ctx.vnode_count, successors)
    participants = list(successor_participants(new_owners, successor_processes))
    roster_changed = tuple(participants) != current.participants
    if new_owners == current_owners and not roster_changed:
        ctx.attempt.idle = True
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
        raise InvalidArgument(f"recovery proposal cannot be built: {error}") from error
    decision = await recovery.authorize_recovery_successor(ctx, current, proposal, reason)
    return await recovery.materialize_recovery_decision(
        ctx, decision, timeout_s=ctx.config.checkpoint_timeout_s
    )
