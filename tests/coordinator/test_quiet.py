"""The leader's quiet check (coordinator/quiet.py; docs/protocols/distributed-checkpoint.md,
DC-21): a periodic checkpoint is skipped only while every participant of the fence, the leader
included, reports `quiescent_through` equal to the leader's last periodic Commit under the same
fence and fencing token; a pre-rotation checkpoint (a drain transition) never leaves a basis to
skip after, and always runs."""

from __future__ import annotations

import asyncio

import msgspec

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX
from laminar_cluster.coordinator.quiet import QuietBasis, QuietCheckpoints, quiet_refusal
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition, ProcessLease
from laminar_cluster.membership.discovery import Member, MembershipView, ObservedState
from laminar_cluster.membership.records import (
    NodeLeaseRecord,
    NodeReport,
    NodeState,
    node_report,
)
from tests.assignment.snapshot_support import participant, proof, snapshot
from tests.coordinator.support import Cluster, make_cluster

FENCE = snapshot_fence(snapshot(1, [1, 1, 2, 2, 3, 3]))
LEADER = proof(1, token=5)
BASIS = QuietBasis(checkpoint_id=7, fence=FENCE, fencing_token=5)
replace = msgspec.structs.replace


def _report(through: int | None) -> NodeReport:
    return node_report({}, 1.0, 1, (), through)


def _member(
    node: int,
    through: int | None,
    *,
    state: ObservedState = ObservedState.ACTIVE,
    boot: str | None = None,
    report: bool = True,
) -> Member:
    record = NodeLeaseRecord(
        version=2,
        lease=ProcessLease(
            node=node,
            owner=boot or participant(node).boot_incarnation,
            term=1,
            seq=3,
            expires_at_ms=0,
        ),
        state=NodeState.ACTIVE,
        ttl_ms=10_000,
        nonce="00000000-0000-4000-8000-000000000002",
        failure_domain=None,
        takeovers=(),
        report=_report(through) if report else None,
    )
    return Member(node=node, state=state, record=record, unchanged_s=0.0)


def _view(*members: Member) -> MembershipView:
    return MembershipView(members=members, problems=(), observed_at_s=0.0)


QUIET_VIEW = _view(_member(1, None), _member(2, 7), _member(3, 7))


def test_dc21_skip_when_every_participant_reports_the_last_commit() -> None:
    # The leader's own member is not read (its engine is, directly): its report may lag.
    assert quiet_refusal(BASIS, FENCE, LEADER, 7, QUIET_VIEW) is None


def test_dc21_a_missing_older_none_or_foreign_report_checkpoints() -> None:
    """(c): any participant that does not show quiescence through the last Commit in its
    latest record, from the fence's boot and live, makes the leader checkpoint as today."""
    other_boot = participant(3, boot=99).boot_incarnation
    views = {
        "missing": _view(_member(1, None), _member(2, 7)),
        "no report": _view(_member(2, 7), _member(3, None, report=False)),
        "older": _view(_member(2, 7), _member(3, 6)),
        "busy": _view(_member(2, 7), _member(3, None)),
        "another boot": _view(_member(2, 7), _member(3, 7, boot=other_boot)),
        "suspected": _view(_member(2, 7), _member(3, 7, state=ObservedState.SUSPECTED)),
        "dead": _view(_member(2, 7), _member(3, 7, state=ObservedState.DEAD)),
    }
    for name, view in views.items():
        assert quiet_refusal(BASIS, FENCE, LEADER, 7, view) is not None, name
    assert quiet_refusal(BASIS, FENCE, LEADER, 7, None) is not None


def test_dc21_only_the_same_leader_fence_and_a_quiet_local_engine_skip() -> None:
    other: CheckpointAssignmentFence = snapshot_fence(snapshot(2, [1, 1, 2, 2, 3, 3]))
    assert quiet_refusal(None, FENCE, LEADER, 7, QUIET_VIEW) is not None  # a new leader's first
    assert quiet_refusal(BASIS, FENCE, proof(1, token=6), 7, QUIET_VIEW) is not None
    assert quiet_refusal(BASIS, FENCE, None, 7, QUIET_VIEW) is not None
    assert quiet_refusal(BASIS, other, LEADER, 7, QUIET_VIEW) is not None  # the fence moved
    assert quiet_refusal(BASIS, FENCE, LEADER, None, QUIET_VIEW) is not None  # busy itself
    assert quiet_refusal(BASIS, FENCE, LEADER, 6, QUIET_VIEW) is not None


def test_dc21_quiet_checkpoints_counts_skips_and_keeps_the_refusal() -> None:
    through: list[int | None] = [7]
    quiet = QuietCheckpoints(lambda: BASIS, lambda: LEADER, lambda: through[0], lambda: QUIET_VIEW)
    assert quiet.skip(FENCE) and quiet.skipped == 1 and quiet.last_refusal is None
    through[0] = None
    assert not quiet.skip(FENCE) and quiet.skipped == 1
    assert quiet.last_refusal is not None and "this node" in quiet.last_refusal


def _drain(cluster: Cluster) -> AssignmentDrainTransition:
    target = snapshot_fence(snapshot(2, list(cluster.owners)))
    return AssignmentDrainTransition(predecessor=cluster.fence, target=target, leader=cluster.proof)


def test_dc21_a_periodic_commit_is_the_basis_and_a_pre_rotation_checkpoint_always_runs() -> None:
    """(d): the checkpointer leaves a basis only after a periodic Commit; a pre-rotation
    checkpoint (with its drain transition) is never asked whether to skip, writes its prepare
    after a quiet basis, and leaves no basis behind it."""

    async def main() -> None:
        cluster = await make_cluster("memory://", (1, 1, 2, 2))
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2)]
        async with cluster.running(participants):
            assert cluster.leader.quiet_basis is None
            first = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
            assert first.success
            basis = cluster.leader.quiet_basis
            assert basis == QuietBasis(
                first.checkpoint_id, cluster.fence, cluster.proof.fencing_token
            )
            prepares = len(await cluster.store.list(ATTEMPTS_PREFIX))
            drained = await cluster.leader(
                cluster.fence, _drain(cluster), deadline=cluster.deadline()
            )
            assert drained.success and drained.checkpoint_id > first.checkpoint_id
            assert len(await cluster.store.list(ATTEMPTS_PREFIX)) > prepares
            assert cluster.leader.quiet_basis is None  # the next periodic one runs

    asyncio.run(main())
