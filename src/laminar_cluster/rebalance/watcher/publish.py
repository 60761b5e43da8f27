"""`publish_authority`: the watcher's per-tick re-publication of this process's vnode-state
report and of the owner-complete transport/checkpoint fence (RB §4.12; RB-12, RB-18).

A fence is activated only for the exact committed snapshot the local registry runs, and only
when every current participant has durably reported adopting exactly that map (RB-18). Any sign
that another path closed authority since the tick read the head (the engine's authority
revision moved) closes again and marks the watcher dirty; the next tick re-reads (RB-12).

Our engine's `activate_authority` does not take the controller (the Rust
`activate_watcher_assignment_authority` does), so after an installed activation this module
publishes the fence and drain transition into the controller's local slots itself. There is
no await between the two, so no other task sees one without the other.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol

from laminar_cluster.assignment.digest import fence_digest, owner_map_digest
from laminar_cluster.assignment.placement import Locality, PlacementMetrics, placement_metrics
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec import digest32
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.owner_certificate import read_owner_certificate
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import suspend_local_assignment_authority
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption
from laminar_cluster.rebalance.watcher.settle import (
    STEP_FAILURES,
    adoption_lock,
    exact_committed_fence,
)
from laminar_cluster.rebalance.watcher.state import FenceIdentity, WatcherState

logger: Final = logging.getLogger(__name__)


# A routine wait (a fresh cluster, a full restart), not a fault: INFO, in plain words.
CERTIFICATE_WAIT = (
    "waiting for the owner-complete assignment certificate (every owner reports its vnode "
    "state); the assignment authority starts once it is complete"
)


class PlacementSink(Protocol):
    """Where the watcher publishes placement metrics (RB §3.4, RB §6.5). The metrics layer (above
    rebalance) implements it: reset the `placement_vnodes_per_domain` gauge vector, set one
    series per domain, and set `placement_blast_radius_ratio`."""

    def publish_placement(self, metrics: PlacementMetrics) -> None: ...


async def publish_authority(
    ctx: RebalanceContext,
    state: WatcherState,
    revision: int,
    *,
    timeout_s: float,
    metrics: PlacementSink | None = None,
) -> None:
    """RB §4.12, bounded by a fresh `timeout_s`. `revision` is the engine's authority revision
    the tick read before it loaded the head."""
    deadline = ctx.deadline_in(timeout_s)
    engine = ctx.engine
    current = engine.authority_revision()
    if revision != current:
        _close(ctx, state, "authority changed after the head was read")
        return
    if state.installed_fence is not None and state.installed_authority_revision != current:
        state.dirty = True
    try:
        async with adoption_lock(ctx, deadline, "vnode-state report publication"):
            local = engine.registry()
            exact = _exact_fence(state, local)
            if exact is not None and not await _publish_report(ctx, local, exact, deadline):
                return
    except STEP_FAILURES as error:
        state.dirty = True
        logger.warning("assignment authority publication skipped: %s", error)
        return
    if metrics is not None and local.version != state.metrics_version:
        publish_placement_metrics(ctx, local, metrics)
        state.metrics_version = local.version
    fence = None
    if exact is not None:
        fence = await read_owner_certificate(ctx.controller, local, exact.participants, deadline)
        if fence is not None and fence.participants != exact.participants:
            fence = None
    if revision != engine.authority_revision():
        _close(ctx, state, "authority changed while the fence was computed")
        return
    if fence is None:
        if not state.dirty:
            state.dirty = True
            try:
                await suspend_local_assignment_authority(ctx, deadline=deadline)
            except STEP_FAILURES as error:
                logger.warning("authority suspension failed: %s", error)
            logger.info(CERTIFICATE_WAIT)
        return
    transition = state.durable_drain_transition
    if transition is not None and transition.predecessor != fence:
        transition = None
    if transition is None:
        # A drain of this very fence that the leader's own rotation installed after its CAS,
        # under the adoption lock (graceful.py), before this tick's head read could see it:
        # keep it. Republishing None here would break the leader's own ack.
        installed = ctx.controller.checkpoint_drain_transition()
        if installed is not None and installed.predecessor == fence:
            transition = installed
    identity: FenceIdentity = (fence.assignment_version, fence_digest(fence))
    if _needs_activation(ctx, state, fence, identity, transition):
        await _activate(ctx, state, fence, identity, transition, revision, deadline)


def _exact_fence(state: WatcherState, local: RegistrySnapshot) -> CheckpointAssignmentFence | None:
    cached = state.durable_snapshot
    return None if cached is None else exact_committed_fence(cached, local)


async def _publish_report(
    ctx: RebalanceContext,
    local: RegistrySnapshot,
    exact: CheckpointAssignmentFence,
    deadline: float,
) -> bool:
    """RB §4.12 step 4: always write the report (other paths write the same slot). A process
    that is not an exact participant reports `false`: its durable "topology observed" ack."""
    me = ctx.me
    try:
        async with within_deadline(ctx.clock, deadline, "vnode-state report"):
            ready = exact.participant_incarnation(
                me.node_id
            ) == me.boot_incarnation and await ctx.engine.local_vnode_state_is_ready(
                exact, deadline=deadline
            )
            report = CheckpointAssignmentAdoption(
                version=1,
                participant=me,
                assignment_version=local.version,
                vnode_count=len(local.owners),
                assignment_digest=digest32(owner_map_digest(len(local.owners), local.owners)),
                vnode_state_ready=ready,
            )
            await ctx.controller.announce_adopted_assignment(report, deadline=deadline)
    except STEP_FAILURES as error:
        logger.warning("assignment %d: vnode-state report not published: %s", local.version, error)
        return False
    return True


def _needs_activation(
    ctx: RebalanceContext,
    state: WatcherState,
    fence: CheckpointAssignmentFence,
    identity: FenceIdentity,
    transition: AssignmentDrainTransition | None,
) -> bool:
    controller, me = ctx.controller, ctx.me
    participant = fence.participant_incarnation(me.node_id) == me.boot_incarnation
    return (
        state.dirty
        or state.installed_fence != identity
        or state.installed_transition != transition
        or controller.certify_owner_map(fence.assignment_version) != fence
        or controller.checkpoint_drain_transition() != transition
        or (
            participant
            and not controller.is_recovering()
            and transition is None
            and ctx.engine.cluster_intake_fenced()
        )
    )


async def _activate(
    ctx: RebalanceContext,
    state: WatcherState,
    fence: CheckpointAssignmentFence,
    identity: FenceIdentity,
    transition: AssignmentDrainTransition | None,
    revision: int,
    deadline: float,
) -> None:
    """RB §4.12 step 9: install `fence` (and `transition`) unless the revision moved."""
    engine, controller = ctx.engine, ctx.controller
    if state.installed_fence is not None and state.installed_fence != identity:
        _withdraw(ctx)
        engine.suspend_shuffle_fence()
        revision = engine.authority_revision()
        state.installed_fence = None
    try:
        activation = await engine.activate_authority(fence, transition, revision, deadline=deadline)
    except STEP_FAILURES as error:
        state.installed_fence = None
        state.dirty = True
        logger.warning(
            "assignment %d: authority activation failed: %s", fence.assignment_version, error
        )
        return
    if not activation.installed:
        state.dirty = True
        return
    controller.publish_checkpoint_assignment_fence(fence)
    controller.publish_checkpoint_drain_transition(transition)
    state.installed_fence = identity
    state.installed_transition = transition
    state.installed_authority_revision = activation.revision
    state.dirty = False


def _withdraw(ctx: RebalanceContext) -> None:
    """Close: source gate on, no published fence, no published drain transition."""
    ctx.engine.set_source_gate(True)
    ctx.controller.publish_checkpoint_assignment_fence(None)
    ctx.controller.publish_checkpoint_drain_transition(None)


def _close(ctx: RebalanceContext, state: WatcherState, reason: str) -> None:
    _withdraw(ctx)
    state.dirty = True
    logger.info("assignment authority closed: %s", reason)


def publish_placement_metrics(
    ctx: RebalanceContext, local: RegistrySnapshot, sink: PlacementSink
) -> None:
    """RB §3.4: placement of the local registry over the assignable members and their failure
    domains, at the configured isolation tier."""
    assignable = set(ctx.controller.assignable_instances())
    nodes = [
        (member.node_id, Locality.parse(member.failure_domain or ""))
        for member in ctx.controller.members_watch().current()
        if member.node_id in assignable
    ]
    sink.publish_placement(
        placement_metrics(local.owners, nodes, ctx.config.placement_isolation_tier)
    )
