"""Startup selection and graceful exit (spec_rebalance §4.17; S4, S11).

* `startup_committed_assignment`: the assignment a starting process may run. A draining head has
  not transferred ownership (S4), so startup keeps its exact audited predecessor; a process
  never starts on a draining target.
* `wait_until_drained`: a node leaving gracefully polls until an authority-backed committed
  head gives it no vnodes. It fails closed: a missing head, a draining head, a terminal it
  cannot audit (no authority) and a wrong vnode count all keep it waiting, and the deadline
  ends the wait with False.

`wait_until_drained` runs without a `RebalanceContext` (a leaving process may have no engine
left), so its audit (`audit_head_with_authority`, the seed's
`audit_materialized_drain_with_authority`) works on the snapshot store and the optional
authority alone. It checks the same durable edges as `audits.audit_snapshot_authority_outcome`
(decision, exact committed predecessor, verdict or staged proposal), but not the recovery
checkpoint pin state, which only matters to a process that adopts the generation.
"""

from __future__ import annotations

import logging
import math
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence, to_vnode_vec
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    assignment_recovery_decision,
)
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.drain import (
    audit_snapshot_authority_outcome,
    finalized_drain_outcome,
    verdict_outcome,
)
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.interfaces import RebalanceError

logger: Final = logging.getLogger(__name__)


async def startup_committed_assignment(
    ctx: RebalanceContext, head: AssignmentSnapshot, *, deadline: float | None = None
) -> AssignmentSnapshot:
    """The committed assignment a starting process adopts (§4.17): `head` itself when it is
    committed, else the exact committed predecessor its drain transition binds. Every read is
    bounded by `deadline` (default `now + checkpoint_timeout`)."""
    deadline = ctx.head_deadline() if deadline is None else deadline
    version = head.assignment_version
    async with within_deadline(ctx.clock, deadline, f"startup assignment {version} selection"):
        await _audit(ctx, head, deadline, f"audit startup assignment {version} authority")
        if not head.draining:
            return head
        transition = await ctx.snapshots.load_drain_transition(version)
        if transition is None:
            raise RebalanceError(f"draining startup assignment {version} has no exact transition")
        if head.drain_transition != transition:
            raise RebalanceError(
                f"draining startup assignment {version} does not match its durable transition"
            )
        prior = await _retained_predecessor(ctx.snapshots, version, transition)
        await _audit(ctx, prior, deadline, f"audit retained assignment {version - 1} authority")
        return prior


async def _retained_predecessor(
    snapshots: AssignmentSnapshotStore, version: int, transition: AssignmentDrainTransition
) -> AssignmentSnapshot:
    prior_version = version - 1
    if prior_version < 1:
        raise RebalanceError(f"draining assignment {version} has no retained committed predecessor")
    prior = await snapshots.load_version(prior_version)
    if prior is None:
        raise RebalanceError(
            f"draining assignment {version} has no retained committed predecessor {prior_version}"
        )
    if prior.draining:
        raise RebalanceError(
            f"draining assignment {version} has a draining predecessor {prior_version}"
        )
    if _fence_or_none(prior) != transition.predecessor:
        raise RebalanceError(
            f"draining assignment {version} does not bind retained predecessor {prior_version}"
        )
    return prior


async def _audit(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, deadline: float, what: str
) -> None:
    try:
        await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    except RebalanceError as error:
        raise RebalanceError(f"{what}: {error}") from error
    except DeadlineExceeded:
        raise
    except LaminarError as error:
        raise RebalanceError(f"{what}: {error}") from error


async def wait_until_drained(
    snapshots: AssignmentSnapshotStore,
    authority: LeaderLeaseStore | None,
    me: int,
    vnode_count: int,
    poll_s: float,
    deadline: float,
    clock: Clock,
) -> bool:
    """Poll until an authority-backed committed head gives node `me` no vnode (True), or
    `deadline` (absolute `clock.monotonic()`) passes (False). A head load that outlives the
    deadline returns False at once (§4.17)."""
    if not poll_s > 0:
        raise InvalidArgument(f"wait_until_drained: poll_s must be > 0, not {poll_s!r}")
    remaining_s = deadline - clock.monotonic()
    polls_max = max(1, math.ceil(remaining_s / poll_s) + 1)  # the deadline ends it first
    for _ in range(polls_max):
        if clock.monotonic() >= deadline:
            return False
        try:
            async with within_deadline(clock, deadline, "wait_until_drained head load"):
                head = await snapshots.load()
                if head is not None and await _drained(snapshots, authority, head, me, vnode_count):
                    return True
        except DeadlineExceeded:
            logger.warning("wait_until_drained: the head read outlived the deadline")
            return False
        except LaminarError as error:
            logger.warning("wait_until_drained: assignment head read failed: %s", error)
        else:
            if head is None:
                logger.warning("wait_until_drained: no durable assignment head; ownership unknown")
        remaining_s = deadline - clock.monotonic()
        if remaining_s <= 0:
            return False
        await clock.sleep(min(poll_s, remaining_s))
    return False


async def _drained(
    snapshots: AssignmentSnapshotStore,
    authority: LeaderLeaseStore | None,
    head: AssignmentSnapshot,
    me: int,
    vnode_count: int,
) -> bool:
    version = head.assignment_version
    try:
        await audit_head_with_authority(snapshots, authority, head)
    except RebalanceError as error:
        logger.warning(
            "wait_until_drained: assignment %d authority audit failed: %s", version, error
        )
        return False
    try:
        owners = to_vnode_vec(head, vnode_count)
    except ShapeViolation as error:
        logger.warning("wait_until_drained: assignment %d cardinality mismatch: %s", version, error)
        return False
    return not head.draining and me not in owners


async def audit_head_with_authority(
    snapshots: AssignmentSnapshotStore,
    authority: LeaderLeaseStore | None,
    snapshot: AssignmentSnapshot,
) -> None:
    """A head's durable authority edge, without a context (§4.17
    `audit_materialized_drain_with_authority`): nothing for a draining head or version 1;
    a drain terminal needs its decision, its exact committed predecessor and a matching
    verdict; a recovery generation needs its decision, its staged proposal and its exact
    committed predecessor. Both need `authority`; RebalanceError otherwise."""
    version = snapshot.assignment_version
    if snapshot.draining or version == 1:
        return
    try:
        transition = await snapshots.load_drain_transition(version)
        if authority is None:
            kind = "drain terminal" if transition is not None else "successor"
            raise RebalanceError(
                f"materialized assignment {kind} {version} has no cluster authority"
            )
        if transition is None:
            await _audit_recovery_edge(snapshots, authority, snapshot)
        else:
            await _audit_drain_edge(snapshots, authority, snapshot, transition)
    except RebalanceError:
        raise
    except (LaminarError, ShapeViolation) as error:
        raise RebalanceError(f"assignment {version} authority audit: {error}") from error


async def _audit_drain_edge(
    snapshots: AssignmentSnapshotStore,
    authority: LeaderLeaseStore,
    snapshot: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
) -> None:
    version = snapshot.assignment_version
    decision = await assignment_drain_decision(authority, version)
    if decision is None:
        raise RebalanceError(
            f"assignment {version}: materialized drain outcome without an authority decision"
        )
    if decision.transition != transition:
        raise RebalanceError(
            f"assignment {version}: the drain decision names a different transition"
        )
    await _committed_predecessor(snapshots, version, transition.predecessor)
    outcome = finalized_drain_outcome(transition, snapshot)
    if outcome is not verdict_outcome(decision.verdict):
        raise RebalanceError(
            f"assignment {version}: materialized {outcome.value} contradicts the authority "
            f"verdict {decision.verdict.value}"
        )


async def _audit_recovery_edge(
    snapshots: AssignmentSnapshotStore, authority: LeaderLeaseStore, snapshot: AssignmentSnapshot
) -> None:
    version = snapshot.assignment_version
    decision = await assignment_recovery_decision(authority, version)
    if decision is None:
        raise RebalanceError(
            f"assignment {version} has no drain transition or recovery authority decision"
        )
    proposal = await snapshots.load_recovery_proposal_snapshot(decision.proposal)
    if proposal != snapshot or _fence_or_none(proposal) != decision.target:
        raise RebalanceError(
            f"assignment {version} does not match its authorized recovery proposal"
        )
    await _committed_predecessor(snapshots, version, decision.predecessor)


async def _committed_predecessor(
    snapshots: AssignmentSnapshotStore, version: int, expected: CheckpointAssignmentFence
) -> None:
    predecessor = await snapshots.load_version(version - 1)
    if predecessor is None:
        raise RebalanceError(f"assignment {version}: lost predecessor {version - 1}")
    if predecessor.draining or _fence_or_none(predecessor) != expected:
        raise RebalanceError(
            f"assignment {version}: successor does not bind its exact committed predecessor"
        )


def _fence_or_none(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence | None:
    try:
        return snapshot_fence(snapshot)
    except ShapeViolation:
        return None
