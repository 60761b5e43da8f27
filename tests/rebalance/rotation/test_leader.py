"""The leader's decision procedure and graceful rotation (RB §4.3-§4.8;
RB-T25..RB-T30, RB-T35..RB-T47, RB-T73), on memory:// and file://, with real controllers, real
authority and the BaseEngine.

Layout: vnode_count 4, boots are fresh per process; node 1 leads unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TypeVar

import msgspec
import pytest

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.model import next_draining, next_for_participants, snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.authority.handoff_pins import assignment_handoff_checkpoint
from laminar_cluster.authority.recovery_faults import recovery_fault_inventory
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    CorruptRecord,
    Fenced,
    LaminarError,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition, AssignmentVerdict
from laminar_cluster.membership import NodeState
from laminar_cluster.rebalance.cluster.slots import read_drain_acks
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.rebalance.interfaces import CheckpointResult, SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.graceful import (
    Resolved,
    reconcile_drain_publication,
)
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.rebalance.refusal_support import raises_because
from tests.rebalance.scenario import Scenario, drive, follower_ack, synchronous

pytestmark = pytest.mark.parametrize("backend", ["memory", "file"])
V2_KEY = "control/assignment-snapshots/v00000000000000000002.json"
T = TypeVar("T")
replace = msgspec.structs.replace


async def keys(store: ObjectStore) -> list[str]:
    return [meta.key for meta in await store.list("")]


async def joined(store: ObjectStore, *, v1_owners: tuple[int, ...] = (1, 1, 1, 1)) -> Scenario:
    """Nodes 1 and 2 up, v1 installed everywhere, node 1 leads."""
    scenario = await Scenario.start(store, _clock(), (1, 2))
    await scenario.bring_up(v1_owners)
    return scenario


def _clock() -> SimulatedClock:
    return SimulatedClock(seed=5)


async def draining_by(
    scenario: Scenario, leader: int, owners: tuple[int, ...]
) -> AssignmentSnapshot:
    """Publish draining v2 -> `owners` opened by `leader`'s proof (as a leader that then died)."""
    proof = scenario.cluster.controller(leader).capture_leader_proof()
    assert proof is not None
    v1 = await scenario.cluster.snapshots.load()
    assert v1 is not None
    draining = next_draining(
        v1, owners, scenario.cluster.participants(owners), proof, now_ms=scenario.clock.wall_ms()
    )
    assert isinstance(await scenario.cluster.snapshots.save_if_version(draining, 1), Rotated)
    return draining


def transition_of(snapshot: AssignmentSnapshot) -> AssignmentDrainTransition:
    assert snapshot.drain_transition is not None
    return snapshot.drain_transition


@synchronous
async def test_rb_t25_node_join_commits(store: ObjectStore) -> None:
    scenario = await joined(store)
    v1 = await scenario.cluster.snapshots.load()
    assert v1 is not None
    ctx = scenario.ctx(1)

    assert await try_rebalance(ctx, [1, 2]) == 2

    snapshots = scenario.cluster.snapshots
    v2 = await snapshots.load()
    assert v2 is not None and not v2.draining and v2.assignment_version == 2
    assert list(v2.owners) == rendezvous_assignment(4, [1, 2])
    transition = await snapshots.load_drain_transition(2)
    assert transition is not None and transition.predecessor == snapshot_fence(v1)
    decision = await assignment_drain_decision(ctx.authority, 2)
    assert decision is not None and decision.verdict is AssignmentVerdict.COMMIT
    assert decision.handoff_checkpoint is not None
    pinned = await assignment_handoff_checkpoint(ctx.authority, snapshot_fence(v2))
    assert pinned == decision.handoff_checkpoint
    engine = scenario.engines[1]
    assert engine.registry().version == 2 and engine.registry().owners == v2.owners
    assert engine.owned_source_drain_resolved(drain_id(transition), SourceDrainOutcome.COMMIT)
    assert ctx.controller.checkpoint_drain_transition() is None


@synchronous
async def test_rb_t26_joiner_not_in_quorum(store: ObjectStore) -> None:
    scenario = await joined(store)
    assert await try_rebalance(scenario.ctx(1), [1, 2]) == 2
    acks = await read_drain_acks(store, scenario.clock, deadline=scenario.cluster.deadline())
    assert [ack.participant.node_id for ack in acks] == [1]
    assert scenario.engines[2].call_count("prepare_local_source_drain") == 0


@synchronous
async def test_rb_t27_graceful_leave(store: ObjectStore) -> None:
    from laminar_cluster.rebalance.node.selection import wait_until_drained

    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await joined(store, v1_owners=owners)
    cluster = scenario.cluster
    leaver = cluster.node(2)
    await leaver.holder.renew(deadline=cluster.deadline(), state=NodeState.DRAINING)
    await cluster.refresh()
    live = cluster.controller(1).assignable_instances()
    assert live == (1,)

    async def drained() -> bool:
        return await wait_until_drained(
            cluster.snapshots,
            cluster.node(2).authority,
            2,
            4,
            poll_s=0.05,
            deadline=scenario.clock.monotonic() + 0.2,
            clock=scenario.clock,
        )

    assert not await drive(scenario, drained())
    ack = asyncio.ensure_future(follower_ack(scenario, 2))
    assert await drive(scenario, try_rebalance(scenario.ctx(1), live)) == 2
    await ack
    acks = await read_drain_acks(store, scenario.clock, deadline=cluster.deadline())
    assert sorted(a.participant.node_id for a in acks) == [1, 2]
    v2 = await cluster.snapshots.load()
    assert v2 is not None and set(v2.owners) == {1}
    assert await drive(scenario, drained())


@synchronous
async def test_rb_t29_no_change_noop(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await joined(store, v1_owners=owners)
    before = await keys(store)
    assert await try_rebalance(scenario.ctx(1), [1, 2]) is None
    assert await keys(store) == before


@synchronous
async def test_rb_t30_empty_live_still_settles_orphan(store: ObjectStore) -> None:
    scenario = await joined(store)
    draining = await draining_by(scenario, 1, tuple(rendezvous_assignment(4, [1, 2])))
    assert await try_rebalance(scenario.ctx(1), []) == 2
    v2 = await scenario.cluster.snapshots.load()
    v1 = await scenario.cluster.snapshots.load_version(1)
    assert v2 is not None and v1 is not None and not v2.draining
    assert (v2.owners, v2.participants) == (v1.owners, v1.participants)
    decision = await assignment_drain_decision(scenario.ctx(1).authority, 2)
    assert decision is not None and decision.verdict is AssignmentVerdict.ABORT
    assert decision.transition == draining.drain_transition


@synchronous
async def test_rb_t35_ack_timeout_requests_recovery(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await Scenario.start(store, _clock(), (1, 2, 3))
    await scenario.bring_up(owners)
    ctx = scenario.ctx(1)
    with raises_because(Refused, Refusal.ACK_QUORUM_MISSED):
        await drive(scenario, try_rebalance(ctx, [1, 2, 3]))
    head = await scenario.cluster.snapshots.load()
    assert head is not None and head.draining and head.assignment_version == 2
    assert await assignment_drain_decision(ctx.authority, 2) is None
    assert ctx.controller.is_recovering()
    faults = await recovery_fault_inventory(ctx.authority)
    assert [fault.reporter for fault in faults.faults] == [1]
    assert scenario.engines[1].call_count("checkpoint_until") == 0


async def _assert_aborted(scenario: Scenario, kind: type[LaminarError], reason: Refusal) -> None:
    ctx = scenario.ctx(1)
    with raises_because(kind, reason):
        await try_rebalance(ctx, [1, 2])
    snapshots = scenario.cluster.snapshots
    v1 = await snapshots.load_version(1)
    v2 = await snapshots.load()
    assert v1 is not None and v2 is not None
    assert v2.assignment_version == 2 and not v2.draining
    assert (v2.owners, v2.participants) == (v1.owners, v1.participants)
    decision = await assignment_drain_decision(ctx.authority, 2)
    assert decision is not None and decision.verdict is AssignmentVerdict.ABORT
    transition = await snapshots.load_drain_transition(2)
    assert transition is not None
    engine = scenario.engines[1]
    assert engine.owned_source_drain_resolved(drain_id(transition), SourceDrainOutcome.ABORT)
    assert engine.registry().version == 2


class _Failing:
    """A checkpointer whose every checkpoint fails with `error`."""

    def __init__(self, error: LaminarError) -> None:
        self.error = error

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        return CheckpointResult(success=False, error=self.error)


@synchronous
async def test_rb_t36_checkpoint_failure_aborts(store: ObjectStore) -> None:
    scenario = await Scenario.start(store, _clock(), (1, 2))
    scenario.add_engine(1, checkpointer=_Failing(StoreUnavailable("injected")))
    await scenario.bring_up((1, 1, 1, 1))
    await _assert_aborted(scenario, StoreUnavailable, Refusal.HANDOFF_CHECKPOINT_FAILED)


@synchronous
async def test_a_fenced_checkpoint_keeps_its_type_to_the_caller(store: ObjectStore) -> None:
    """A Fenced in `CheckpointResult.error` reaches the rotation's caller (the controller loop,
    which stops on it) as a Fenced, after the drain's Abort."""
    scenario = await Scenario.start(store, _clock(), (1, 2))
    scenario.add_engine(1, checkpointer=_Failing(Fenced("a newer leader term decided")))
    await scenario.bring_up((1, 1, 1, 1))
    await _assert_aborted(scenario, Fenced, Refusal.HANDOFF_CHECKPOINT_FAILED)


@synchronous
async def test_rb_t37_checkpoint_wrong_fence_aborts(store: ObjectStore) -> None:
    scenario = await Scenario.start(store, _clock(), (1, 2))
    node = scenario.cluster.node(1)
    assert node.authority.decisions is not None
    inner = LeaderCheckpointer(
        node.authority.decisions,
        node.authority,
        node.controller.capture_leader_proof,
        lambda fence: scenario.engines[1].registry().owners,
    )

    async def foreign(
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        other = replace(fence, assignment_version=fence.assignment_version + 7)
        return await inner(other, None, deadline=deadline)

    scenario.add_engine(1, checkpointer=foreign)
    await scenario.bring_up((1, 1, 1, 1))
    await _assert_aborted(scenario, CorruptRecord, Refusal.HANDOFF_NOT_PREDECESSOR_CUT)


@synchronous
async def test_rb_t38_leader_crash_before_decision(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await Scenario.start(store, _clock(), (1, 2, 3))
    await scenario.bring_up(owners)
    old_proof = scenario.cluster.controller(1).capture_leader_proof()
    assert old_proof is not None
    draining = await draining_by(scenario, 1, tuple(rendezvous_assignment(4, [1, 2, 3])))
    scenario.cluster.stop(1)
    new_proof = await scenario.cluster.elect(2)
    assert new_proof.fencing_token > old_proof.fencing_token

    ctx = scenario.ctx(2)
    assert await try_rebalance(ctx, [2, 3]) == 2
    decision = await assignment_drain_decision(ctx.authority, 2)
    assert decision is not None and decision.verdict is AssignmentVerdict.ABORT
    assert decision.leader_proof == new_proof
    v2 = await scenario.cluster.snapshots.load()
    assert v2 is not None and v2.owners == owners and not v2.draining
    late = new_drain_decision(transition_of(draining), old_proof, AssignmentVerdict.ABORT)
    with pytest.raises(Fenced):
        await record_assignment_drain_decision(
            ctx.authority, old_proof, late, deadline=scenario.cluster.deadline()
        )


@synchronous
async def test_rb_t39_leader_crash_after_decision_before_finalize(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await Scenario.start(store, _clock(), (1, 2, 3))
    await scenario.bring_up(owners)
    old = scenario.cluster.controller(1)
    old_proof = old.capture_leader_proof()
    assert old_proof is not None
    target_owners = tuple(rendezvous_assignment(4, [1, 2, 3]))
    draining = await draining_by(scenario, 1, target_owners)
    transition = transition_of(draining)
    await scenario.checkpoint(1)
    ctx1 = scenario.ctx(1)
    from laminar_cluster.authority.cluster_outcome_reads import highest_cluster_committed_outcome

    head = await highest_cluster_committed_outcome(ctx1.authority)
    assert head is not None and head.recovery_capsule is not None
    commit = new_drain_decision(
        transition, old_proof, AssignmentVerdict.COMMIT, head.recovery_capsule
    )
    await record_assignment_drain_decision(
        ctx1.authority, old_proof, commit, deadline=scenario.cluster.deadline()
    )
    scenario.cluster.stop(1)
    await scenario.cluster.elect(2)

    ctx = scenario.ctx(2)
    assert await try_rebalance(ctx, [2, 3]) == 2
    v2 = await scenario.cluster.snapshots.load()
    assert v2 is not None and v2.owners == target_owners and not v2.draining
    winner = await assignment_drain_decision(ctx.authority, 2)
    assert winner is not None and winner.verdict is AssignmentVerdict.COMMIT
    assert winner.leader_proof == old_proof
    assert scenario.engines[2].registry().version == 2


@synchronous
async def test_rb_t40_leader_crash_after_cas_before_adopt(store: ObjectStore) -> None:
    scenario = await joined(store)
    assert await try_rebalance(scenario.ctx(1), [1, 2]) == 2
    await scenario.cluster.elect(2)
    ctx = scenario.ctx(2)
    assert scenario.engines[2].registry().version == 1
    before = await keys(store)
    assert await try_rebalance(ctx, [1, 2]) == 2
    assert scenario.engines[2].registry().version == 2
    assert [k for k in await keys(store) if "assignment-snapshots/v" in k] == [
        k for k in before if "assignment-snapshots/v" in k
    ]


@synchronous
async def test_rb_t41_ambiguous_cas_reconciles(store: ObjectStore) -> None:
    scenario = await joined(store)
    faulty = FaultyStore(store, clock=scenario.clock, seed=1)
    ctx = scenario.ctx(1)
    ctx = replace_ctx(ctx, AssignmentSnapshotStore(faulty))
    v1 = await ctx.snapshots.load()
    assert v1 is not None
    proof = ctx.controller.capture_leader_proof()
    assert proof is not None
    drain = next_draining(v1, (1, 2, 1, 2), scenario.cluster.participants([1, 2]), proof, now_ms=0)
    # The create lands but its answer is lost, and the read-back that would settle it fails.
    faulty.fail_next(FaultKind.AFTER, op="put", key_prefix=V2_KEY)
    faulty.fail_next(FaultKind.BEFORE, op="get", key_prefix=V2_KEY)
    resolved = await drive(scenario, reconcile_drain_publication(ctx, drain, 1))
    assert isinstance(resolved, Resolved)
    assert isinstance(resolved.outcome, Rotated) and resolved.outcome.snapshot == drain
    assert not resolved.authority_changed
    assert await ctx.snapshots.load() == drain


def replace_ctx(ctx: RebalanceContext, snapshots: AssignmentSnapshotStore) -> RebalanceContext:
    return dataclasses.replace(ctx, snapshots=snapshots)


@synchronous
async def test_rb_t42_recovering_defers_publication(store: ObjectStore) -> None:
    scenario = await joined(store)
    ctx = scenario.ctx(1)
    ctx.controller.set_recovering(True)
    before = await keys(store)
    assert await try_rebalance(ctx, [1, 2]) is None
    assert [k for k in await keys(store) if "assignment" in k] == [
        k for k in before if "assignment" in k
    ]
    assert await assignment_drain_decision(ctx.authority, 2) is None
    assert ctx.controller.checkpoint_drain_transition() is None


@synchronous
async def test_rb_t43_authority_changed_after_ambiguous_cas(store: ObjectStore) -> None:
    scenario = await joined(store)
    faulty = FaultyStore(store, clock=scenario.clock, seed=1)
    ctx = replace_ctx(scenario.ctx(1), AssignmentSnapshotStore(faulty))
    faulty.fail_next(FaultKind.AFTER, op="put", key_prefix=V2_KEY)
    faulty.fail_next(FaultKind.BEFORE, op="get", key_prefix=V2_KEY)
    leadership = scenario.cluster.node(1).leadership

    async def lose_leadership_during_retry() -> None:
        await scenario.clock.sleep(0.1)
        leadership.set(None)

    loser = asyncio.ensure_future(lose_leadership_during_retry())
    with raises_because(Refused, Refusal.PUBLICATION_AUTHORITY_CHANGED):
        await drive(scenario, try_rebalance(ctx, [1, 2]))
    await loser
    head = await ctx.snapshots.load()
    assert head is not None and head.draining and head.assignment_version == 2


@synchronous
async def test_rb_t44_graceful_deferred_until_ready(store: ObjectStore) -> None:
    # Local vnode state not ready.
    scenario = await Scenario.start(store, _clock(), (1, 2))
    scenario.add_engine(1, vnode_state_ready=lambda fence: False)
    await scenario.bring_up((1, 1, 1, 1))
    assert await try_rebalance(scenario.ctx(1), [1, 2]) is None
    assert (await scenario.cluster.snapshots.load()).assignment_version == 1  # type: ignore[union-attr]


@synchronous
async def test_rb_t44_deferred_until_the_fence_is_published(store: ObjectStore) -> None:
    scenario = await joined(store)
    scenario.cluster.controller(1).publish_checkpoint_assignment_fence(None)
    assert await try_rebalance(scenario.ctx(1), [1, 2]) is None
    assert (await scenario.cluster.snapshots.load()).assignment_version == 1  # type: ignore[union-attr]


@synchronous
async def test_rb_t44_deferred_while_a_remote_participant_is_not_ready(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await joined(store, v1_owners=owners)
    await scenario.cluster.add(3)
    scenario.add_engine(3)
    await scenario.cluster.refresh()
    controller = scenario.cluster.controller(2)
    v1 = await scenario.cluster.snapshots.load()
    assert v1 is not None
    fence = snapshot_fence(v1)
    from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption

    await controller.announce_adopted_assignment(
        CheckpointAssignmentAdoption(
            version=1,
            participant=controller.local_participant(),
            assignment_version=1,
            vnode_count=4,
            assignment_digest=fence.assignment_digest,
            vnode_state_ready=False,
        ),
        deadline=scenario.cluster.deadline(),
    )
    assert await try_rebalance(scenario.ctx(1), [1, 2, 3]) is None
    assert (await scenario.cluster.snapshots.load()).assignment_version == 1  # type: ignore[union-attr]


@synchronous
async def test_rb_t45_wrong_published_fence_errors(store: ObjectStore) -> None:
    scenario = await joined(store)
    controller = scenario.cluster.controller(1)
    v1 = await scenario.cluster.snapshots.load()
    assert v1 is not None
    fence = snapshot_fence(v1)
    other_map = snapshot_fence(
        replace(v1, owners=(1, 2, 1, 2), participants=scenario.cluster.participants([1, 2]))
    )
    wrong = replace(fence, assignment_digest=other_map.assignment_digest)
    controller.publish_checkpoint_assignment_fence(wrong)
    assert controller.certify_owner_map(1) == wrong
    with raises_because(Refused, Refusal.NOT_ADOPTION_CERTIFICATE):
        await try_rebalance(scenario.ctx(1), [1, 2])
    assert (await scenario.cluster.snapshots.load()).assignment_version == 1  # type: ignore[union-attr]


@synchronous
async def test_rb_t46_local_head_validation(store: ObjectStore) -> None:
    scenario = await joined(store, v1_owners=(1, 1, 2, 2))
    v1 = await scenario.cluster.snapshots.load()
    assert v1 is not None
    me = scenario.cluster.participants([1])
    # A registry ahead of the store (it ran a v2 this store never had).
    ahead = next_for_participants(v1, (1, 1, 1, 1), me, now_ms=0)
    await scenario.engines[1].adopt_assignment(ahead, deadline=scenario.cluster.deadline())
    with raises_because(Refused, Refusal.HEAD_REGRESSED):
        await try_rebalance(scenario.ctx(1), [1, 2])
    # The same version with a different owner map.
    scenario.add_engine(1)
    forged = replace(v1, owners=(1, 1, 1, 1), participants=me)
    await scenario.engines[1].adopt_assignment(forged, deadline=scenario.cluster.deadline())
    with raises_because(CorruptRecord, Refusal.OWNERS_DIFFER):
        await try_rebalance(scenario.ctx(1), [1, 2])


@synchronous
async def test_rb_t47_concurrent_rotations(store: ObjectStore) -> None:
    owners = tuple(rendezvous_assignment(4, [1, 2]))
    scenario = await Scenario.start(store, _clock(), (1, 2, 3))
    await scenario.bring_up(owners)
    stale = await draining_by(scenario, 1, tuple(rendezvous_assignment(4, [1, 2, 3])))
    # A second candidate builds a different drain from v1 and loses the CAS.
    ctx2 = scenario.ctx(2)
    scenario.cluster.node(2).leadership.set(scenario.cluster.controller(1).capture_leader_proof())
    from laminar_cluster.rebalance.rotation.graceful import execute_graceful_rotation

    v1 = await scenario.cluster.snapshots.load_version(1)
    assert v1 is not None
    assert (
        await execute_graceful_rotation(ctx2, v1, (2, 2, 2, 2), scenario.cluster.participants([2]))
        == 2
    )
    assert await scenario.cluster.snapshots.load() == stale
    assert scenario.engines[2].registry().version == 1  # a draining winner is only validated
    # The winner's term is stale once node 3 leads: its next attempt aborts it.
    scenario.cluster.stop(1)
    await scenario.cluster.elect(3)
    assert await try_rebalance(scenario.ctx(3), [2, 3]) == 2
    decision = await assignment_drain_decision(scenario.ctx(3).authority, 2)
    assert decision is not None and decision.verdict is AssignmentVerdict.ABORT


@synchronous
async def test_rb_t73_prune_after_finalize(store: ObjectStore) -> None:
    scenario = await Scenario.start(store, _clock(), (1, 2, 3, 4, 5), vnode_count=16)
    await scenario.bring_up((1,) * 16)
    ctx = scenario.ctx(1)
    cluster = scenario.cluster
    # v2..v5: alternately remove and re-add node 5 (aborting via a failing checkpoint is not
    # needed: graceful commits, each pruning below v - 1).
    for members in ([1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]):
        for node_id in members:
            if node_id != 1:
                head = await cluster.snapshots.load()
                assert head is not None
                if scenario.engines[node_id].registry().version < head.assignment_version:
                    await scenario.install(node_id, head)
        acks = [
            asyncio.ensure_future(follower_ack(scenario, n))
            for n in sorted({p.node_id for p in (await cluster.snapshots.load()).participants})  # type: ignore[union-attr]
            if n != 1
        ]
        assert await drive(scenario, try_rebalance(ctx, members)) is not None
        for task in acks:
            await task
        head = await cluster.snapshots.load()
        assert head is not None
        transition = await cluster.snapshots.load_drain_transition(head.assignment_version)
        assert transition is not None
        for node_id in members:
            if node_id != 1 and transition.predecessor.participant_incarnation(node_id):
                await scenario.engines[node_id].resolve_local_source_drain(
                    drain_id(transition), SourceDrainOutcome.COMMIT, deadline=cluster.deadline()
                )
        for node_id in members:
            await scenario.install(node_id, head)
    head = await cluster.snapshots.load()
    assert head is not None and head.assignment_version == 5
    names = await keys(store)
    assert not any(f"v{v:020}" in k for k in names for v in (1, 2, 3))
    assert await cluster.snapshots.load_version(4) is not None
    record = await ctx.authority.load_record()
    assert record is not None and record.assignment_decision_floor is not None
    assert record.assignment_decision_floor.before_target_version == 4


@synchronous
async def test_rb13_recovery_keeps_a_live_draining_predecessor(store: ObjectStore) -> None:
    """A dead owner forces recovery while another owner is leaving gracefully: the leaver is
    healthy (draining, renewing), so recovery keeps it with a vnode instead of trying to fence
    it, and only the dead process is removed."""
    owners = tuple(rendezvous_assignment(16, [1, 2, 3]))
    scenario = await Scenario.start(store, _clock(), (1, 2, 3), vnode_count=16)
    await scenario.bring_up(owners)
    await scenario.checkpoint(1)
    cluster = scenario.cluster
    await cluster.node(2).holder.renew(deadline=cluster.deadline(), state=NodeState.DRAINING)
    cluster.stop(3)
    await cluster.advance(cluster.process_ttl_s + 1.0)
    ctx = scenario.ctx(1)
    live = ctx.controller.assignable_instances()
    assert live == (1,)

    assert await try_rebalance(ctx, live) == 2
    v2 = await cluster.snapshots.load()
    assert v2 is not None and not v2.draining
    assert 2 in v2.owners and 3 not in v2.owners
    assert [p.node_id for p in v2.participants] == [1, 2]
    from laminar_cluster.authority.assignment_decisions import assignment_recovery_decision

    decision = await assignment_recovery_decision(ctx.authority, 2)
    assert decision is not None
    assert [f.predecessor.node for f in decision.removed_process_fences] == [3]


@synchronous
async def test_an_adopted_recovery_generation_is_not_faulted_again(store: ObjectStore) -> None:
    """The leader materializes and adopts a recovery generation itself; its own watcher then
    prepares the same generation: it must not fault the engine again, since adopting the same
    version is a no-op and the restored state would be lost for good."""
    from laminar_cluster.rebalance.interfaces import EngineState
    from laminar_cluster.rebalance.recovery.recover import require_recovery_cold_bootstrap

    owners = tuple(rendezvous_assignment(16, [1, 2]))
    scenario = await Scenario.start(store, _clock(), (1, 2), vnode_count=16)
    await scenario.bring_up(owners)
    await scenario.checkpoint(1)
    cluster = scenario.cluster
    cluster.stop(2)
    await cluster.advance(cluster.process_ttl_s + 1.0)
    ctx = scenario.ctx(1)
    assert await try_rebalance(ctx, ctx.controller.assignable_instances()) == 2
    engine = scenario.engines[1]
    assert engine.registry().version == 2 and engine.state() is EngineState.RUNNING
    v2 = await cluster.snapshots.load()
    assert v2 is not None
    await require_recovery_cold_bootstrap(ctx, v2)
    assert engine.state() is EngineState.RUNNING and engine.installed_vnode_state()
