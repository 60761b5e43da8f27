"""Startup selection and graceful exit (RB §4.17; RB-4, RB-10).

* `startup_committed_assignment`: the assignment a starting process may run. A draining head has
  not transferred ownership (RB-4), so startup keeps its exact audited predecessor; a process
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
checkpoint pin state, which only matters to a process that adopts the generation. Its errors
are those of `audit.drain` (CorruptRecord for contradicting durable objects, Refused for what a
re-read may settle), plus Refused (NO_AUTHORITY) without the authority.
"""

from __future__ import annotations

import logging
import math
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence, to_vnode_vec
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    assignment_recovery_decision,
)
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec.shape import ShapeViolation, reading
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    LaminarError,
    Refused,
    restated,
)
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.drain import (
    audit_snapshot_authority_outcome,
    finalized_drain_outcome,
    verdict_outcome,
)
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.refusals import Refusal, predecessor_lost

logger: Final = logging.getLogger(__name__)


async def startup_committed_assignment(
    ctx: RebalanceContext, head: AssignmentSnapshot, *, deadline: float | None = None
) -> AssignmentSnapshot:
    """The committed assignment a starting process adopts (RB §4.17): `head` itself when it is
    committed, else the exact committed predecessor its drain transition binds. Every read is
    bounded by `deadline` (default `now + checkpoint_timeout`)."""
    deadline = ctx.head_deadline() if deadline is None else deadline
    version = head.assignment_version
    async with within_deadline(ctx.clock, deadline, f"startup assignment {version} selection"):
        await _audit(ctx, head, deadline, f"audit startup assignment {version} authority")
        if not head.draining:
            return head
        transition = await ctx.snapshots.load_drain_transition(version)
        if transition is None or head.drain_transition != transition:
            what = "has no exact" if transition is None else "does not match its durable"
            raise CorruptRecord(
                f"draining startup assignment {version} {what} transition",
                key=snapshot_path(version),
                reason=Refusal.DECISION_MISMATCH,
            )
        prior = await _retained_predecessor(ctx.snapshots, version, transition)
        await _audit(ctx, prior, deadline, f"audit retained assignment {version - 1} authority")
        return prior


async def _retained_predecessor(
    snapshots: AssignmentSnapshotStore, version: int, transition: AssignmentDrainTransition
) -> AssignmentSnapshot:
    prior_version = version - 1
    key = snapshot_path(version)
    if prior_version < 1:
        raise CorruptRecord(
            f"draining assignment {version} has no retained committed predecessor",
            key=key,
            reason=Refusal.RETAINED_PREDECESSOR_NOT_BOUND,
        )
    prior = await snapshots.load_version(prior_version)
    if prior is None:
        raise Refused(
            f"draining assignment {version} has no retained committed predecessor {prior_version}",
            reason=Refusal.PREDECESSOR_LOST,
        )
    if prior.draining or _fence_or_none(prior) != transition.predecessor:
        what = "has a draining" if prior.draining else "does not bind retained"
        raise CorruptRecord(
            f"draining assignment {version} {what} predecessor {prior_version}",
            key=key,
            reason=Refusal.RETAINED_PREDECESSOR_NOT_BOUND,
        )
    return prior


async def _audit(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, deadline: float, what: str
) -> None:
    try:
        await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    except DeadlineExceeded:
        raise
    except LaminarError as error:
        raise restated(error, f"{what}: {error}") from error


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
    deadline returns False at once (RB §4.17)."""
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
    except LaminarError as error:
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
    """A head's durable authority edge, without a context (RB §4.17
    `audit_materialized_drain_with_authority`): nothing for a draining head or version 1;
    a drain terminal needs its decision, its exact committed predecessor and a matching
    verdict; a recovery generation needs its decision, its staged proposal and its exact
    committed predecessor. Both need `authority`; Refused (NO_AUTHORITY) otherwise. A malformed
    record becomes CorruptRecord naming `snapshot`."""
    version = snapshot.assignment_version
    if snapshot.draining or version == 1:
        return
    try:
        transition = await snapshots.load_drain_transition(version)
        if authority is None:
            kind = "drain terminal" if transition is not None else "successor"
            raise Refused(
                f"materialized assignment {kind} {version} has no cluster authority",
                reason=Refusal.NO_AUTHORITY,
            )
        with reading(snapshot_path(version)):
            if transition is None:
                await _audit_recovery_edge(snapshots, authority, snapshot)
            else:
                await _audit_drain_edge(snapshots, authority, snapshot, transition)
    except LaminarError as error:
        raise restated(error, f"assignment {version} authority audit: {error}") from error


async def _audit_drain_edge(
    snapshots: AssignmentSnapshotStore,
    authority: LeaderLeaseStore,
    snapshot: AssignmentSnapshot,
    transition: AssignmentDrainTransition,
) -> None:
    version = snapshot.assignment_version
    key = snapshot_path(version)
    decision = await assignment_drain_decision(authority, version)
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
    await _committed_predecessor(snapshots, version, transition.predecessor)
    outcome = finalized_drain_outcome(transition, snapshot)
    if outcome is not verdict_outcome(decision.verdict):
        raise CorruptRecord(
            f"assignment {version}: materialized {outcome.value} contradicts the authority "
            f"verdict {decision.verdict.value}",
            key=key,
            reason=Refusal.TERMINAL_MISMATCH,
        )


async def _audit_recovery_edge(
    snapshots: AssignmentSnapshotStore, authority: LeaderLeaseStore, snapshot: AssignmentSnapshot
) -> None:
    version = snapshot.assignment_version
    key = snapshot_path(version)
    decision = await assignment_recovery_decision(authority, version)
    if decision is None:
        raise CorruptRecord(
            f"assignment {version} has no drain transition or recovery authority decision",
            key=key,
            reason=Refusal.NO_AUTHORITY_DECISION,
        )
    proposal = await snapshots.load_recovery_proposal_snapshot(decision.proposal)
    if proposal != snapshot or _fence_or_none(proposal) != decision.target:
        raise CorruptRecord(
            f"assignment {version} does not match its authorized recovery proposal",
            key=key,
            reason=Refusal.DECISION_MISMATCH,
        )
    await _committed_predecessor(snapshots, version, decision.predecessor)


async def _committed_predecessor(
    snapshots: AssignmentSnapshotStore, version: int, expected: CheckpointAssignmentFence
) -> None:
    predecessor = await snapshots.load_version(version - 1)
    if predecessor is None:
        raise predecessor_lost(version)
    if predecessor.draining or _fence_or_none(predecessor) != expected:
        raise CorruptRecord(
            f"assignment {version}: successor does not bind its exact committed predecessor",
            key=snapshot_path(version),
            reason=Refusal.PREDECESSOR_NOT_BOUND,
        )


def _fence_or_none(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence | None:
    try:
        return snapshot_fence(snapshot)
    except ShapeViolation:
        return None
