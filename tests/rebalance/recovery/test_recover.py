"""The recovery path, leader side, and the recovery audit (RB §1.2, RB §4.9, RB §4.10,
RB §4.14, RB §4.16; scenarios RB-T28, RB-T48..RB-T53, RB-T70, RB-T74). Memory store, simulated
clock, real controllers, ControlEngines and leader authority."""

from __future__ import annotations

import msgspec
import pytest

from laminar_cluster.assignment.model import next_draining, next_for_participants, snapshot_fence
from laminar_cluster.assignment.paths import materialization_path, snapshot_path
from laminar_cluster.assignment.snapshot import Rotated
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    assignment_recovery_decision,
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_outcome,
    cluster_outcome_with_recovery_capsule,
    highest_cluster_committed_outcome,
)
from laminar_cluster.authority.handoff_pins import rollback_fence
from laminar_cluster.authority.recovery_faults import recovery_fault_inventory
from laminar_cluster.checkpoint.capsule import reference_path
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import CorruptRecord, Refused
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.rebalance.audit.drain import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.recovery import validate_portable_recovery_cut
from laminar_cluster.rebalance.audit.results import PinState
from laminar_cluster.rebalance.engine.handoff_checkpoint import (
    EMPTY_PIPELINE,
    LeaderCheckpointer,
    capsule_participants,
)
from laminar_cluster.rebalance.interfaces import INITIAL_STATE, EngineState
from laminar_cluster.rebalance.recovery.inflight import attempt_capsules
from laminar_cluster.rebalance.recovery.recover import (
    abort_predecessor_checkpoint_for_recovery,
    authorize_recovery_successor,
)
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.planner import predecessor_cut_unavailability, try_rebalance
from laminar_cluster.store import ObjectStore
from tests.rebalance.cluster_support import exists
from tests.rebalance.recovery_support import RecoveryCluster, run
from tests.rebalance.refusal_support import raises_because


async def _faulted_nodes(rc: RecoveryCluster, leader: int) -> set[int]:
    inventory = await recovery_fault_inventory(rc.proc(leader).node.authority)
    return {fault.reporter for fault in inventory.faults}


def test_rb_t28_dead_owner_recovery() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        cut = await rc.checkpoint(1)
        await rc.leave(2)
        leader = rc.proc(1)
        leader.controller.note_unresponsive(2)

        assert await try_rebalance(leader.ctx, [1, 2]) == 2

        authority = leader.node.authority
        decision = await assignment_recovery_decision(authority, 2)
        assert decision is not None
        assert decision.predecessor == snapshot_fence(v1)
        v2 = await rc.head()
        assert v2.assignment_version == 2 and v2.owners == (1, 1)
        assert v2.participants == (leader.me,)
        assert decision.target == snapshot_fence(v2)
        assert [f.predecessor.node for f in decision.removed_process_fences] == [2]
        assert decision.removed_process_fences[0].predecessor.owner == rc.cluster.node(2).boot
        assert decision.recovery_checkpoint == cut
        assert await exists(store, materialization_path(2))
        assert await rc.cluster.snapshots.load_drain_transition(2) is None
        assert leader.engine.cluster_intake_fenced()
        # The durable fault was published; the cold restore from `cut` is our Release, so the
        # leader is no longer recovering and its next live rotation is not deferred.
        assert await _faulted_nodes(rc, 1) == {1}
        assert not leader.controller.is_recovering()
        assert leader.engine.registry().version == 2
        assert leader.engine.recovery_checkpoint() == cut
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None and audited.recovery.state is PinState.ACTIVE

    run(body)


def test_rb_t48_replacement_process_aborts_then_recovers() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 1), leader=1)
        v1 = await rc.head()
        await rc.checkpoint(1)
        old = rc.proc(1)
        old_proof = old.controller.capture_leader_proof()
        assert old_proof is not None
        joiner = rc.cluster.node(2).participant
        drain = next_draining(v1, [1, 2], [old.me, joiner], old_proof, now_ms=clock.wall_ms())
        assert isinstance(await rc.cluster.snapshots.save_if_version(drain, 1), Rotated)
        await rc.die(2)
        new = await rc.restart(1)
        new_proof = await rc.cluster.elect(1)

        assert await try_rebalance(new.ctx, [1]) == 2
        abort = await assignment_drain_decision(new.node.authority, 2)
        assert abort is not None and abort.verdict is AssignmentVerdict.ABORT
        assert abort.leader_proof == new_proof != old_proof
        rollback = await rc.head()
        assert rollback.owners == (1, 1) and rollback.participants == (old.me,)
        assert new.engine.registry().version == 0
        assert new.engine.cluster_intake_fenced()

        assert await try_rebalance(new.ctx, [1]) == 3
        v3 = await rc.head()
        assert v3.assignment_version == 3
        assert v3.owners == (1, 1) and v3.participants == (new.me,)
        decision = await assignment_recovery_decision(new.node.authority, 3)
        assert decision is not None and decision.leader_proof == new_proof
        assert [f.predecessor.owner for f in decision.removed_process_fences] == [
            old.me.boot_incarnation
        ]
        assert new.engine.registry().version == 3
        assert new.engine.cluster_intake_fenced()

    run(body)


def test_replacement_leader_materializes_a_decision_for_its_previous_boot() -> None:
    """Simulation seed 33381: leader node 1 records the recovery decision for v2, which
    certifies its own boot, and crashes before materializing it; its replacement boot is
    elected. It materializes v2 without adopting it (RB §4.9 step 4 would refuse, and the head
    stayed at v1 for good while node 1 kept the leadership), then recovers its previous boot
    out of v2 like any replaced boot."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        cut = await rc.checkpoint(1)
        old = rc.proc(1)
        await rc.die(2)
        proposal = next_for_participants(v1, [1, 1], [old.me], now_ms=clock.wall_ms())
        decided = await authorize_recovery_successor(old.ctx, v1, proposal, "node-2 died")
        assert decided.target == snapshot_fence(proposal)
        new = await rc.restart(1)
        await rc.cluster.elect(1)

        assert await try_rebalance(new.ctx, [1]) == 2
        v2 = await rc.head()
        assert v2 == proposal and v2.participants == (old.me,)
        assert new.engine.registry().version == 0  # never runs its previous boot's generation

        assert await try_rebalance(new.ctx, [1]) == 3
        v3 = await rc.head()
        assert v3.owners == (1, 1) and v3.participants == (new.me,)
        assert new.engine.registry().version == 3
        assert new.engine.recovery_checkpoint() == cut

    run(body)


def test_rb_t49_renewing_predecessor_blocks_recovery() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        await rc.checkpoint(1)
        leader = rc.proc(1)
        leader.controller.note_unresponsive(2)  # quarantined, but still renewing its lease

        with raises_because(Refused, Refusal.PROCESS_RENEWED):
            await try_rebalance(leader.ctx, [1, 2])
        assert (await rc.head()).assignment_version == 1
        assert await assignment_recovery_decision(leader.node.authority, 2) is None
        assert not await exists(store, materialization_path(2))
        assert not leader.controller.is_recovering()
        assert await _faulted_nodes(rc, 1) == set()

    run(body)


def test_rb_t50_recovery_retains_healthy_predecessor() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (3, 5, 7, 9), (3, 9), leader=3)
        await rc.checkpoint(3)
        await rc.die(9)
        await rc.cluster.elect(3)  # the leader term outlived its ttl while 9 was dying
        leader = rc.proc(3)

        assert await try_rebalance(leader.ctx, [3, 5, 7]) == 2
        v2 = await rc.head()
        assert v2.owners == (3, 7)
        assert v2.participants == (leader.me, rc.proc(7).me)
        decision = await assignment_recovery_decision(leader.node.authority, 2)
        assert decision is not None
        assert [f.predecessor.node for f in decision.removed_process_fences] == [9]

    run(body)


def test_rb_t51_quarantine_overrides_active() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        leader = rc.proc(1)
        states = {m.node_id: m.state for m in leader.controller.members_watch().current()}
        assert states[2] == "active"
        assert await predecessor_cut_unavailability(leader.ctx, v1, [1, 2], [1]) is None

        leader.controller.note_unresponsive(2)
        reason = await predecessor_cut_unavailability(leader.ctx, v1, [1, 2], [1])
        assert reason == "predecessor owner node-2 cannot certify the source cut"

    run(body)


async def _in_flight(rc: RecoveryCluster, leader: int, checkpoint_id: int) -> None:
    """An attempt under v1 that allocated its ID and wrote its capsule, but never decided."""
    proc = rc.proc(leader)
    decisions = proc.node.authority.require_decisions()
    allocated = await decisions.allocate_checkpoint_id_at_least(
        checkpoint_id, deadline=rc.deadline()
    )
    assert allocated == checkpoint_id
    v1 = await rc.cluster.snapshots.load_version(1)
    assert v1 is not None
    capsule = ClusterRecoveryCapsule(
        version=5,
        attempt=CheckpointAttempt.canonical(checkpoint_id),
        deployment_id=await decisions.load_or_create_deployment_id(),
        pipeline_identity=EMPTY_PIPELINE,
        assignment_fence=snapshot_fence(v1),
        participants=capsule_participants(snapshot_fence(v1), v1.owners),
        source_offsets={},
        portable=True,
        predecessor=None,
    )
    await decisions.create_recovery_capsule(capsule)


def test_rb_t52_recovery_aborts_inflight_predecessor_checkpoint() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        cut = await rc.checkpoint(1)
        await _in_flight(rc, 1, cut.checkpoint_id + 1)
        await rc.leave(2)
        leader = rc.proc(1)
        authority = leader.node.authority
        decisions = authority.require_decisions()

        assert await try_rebalance(leader.ctx, [1, 2]) == 2
        aborted = await cluster_outcome(authority, cut.checkpoint_id + 1)
        assert aborted is not None and aborted.verdict is CheckpointVerdict.ABORT
        assert aborted.assignment_fence == snapshot_fence(v1)
        assert aborted.recovery_capsule is None and aborted.leader_proof is not None
        assert len(await attempt_capsules(decisions, cut.checkpoint_id + 1)) == 1  # kept

        v2 = await rc.head()
        record = await authority.load_record()
        await abort_predecessor_checkpoint_for_recovery(leader.ctx, v2, deadline=rc.deadline())
        assert await authority.load_record() == record  # idempotent: nothing written

        # A late predecessor attempt: a follower (no leader proof) leaves it alone.
        late = cut.checkpoint_id + 2
        await _in_flight(rc, 1, late)
        proof = leader.controller.capture_leader_proof()
        leader.node.leadership.set(None)
        await abort_predecessor_checkpoint_for_recovery(leader.ctx, v2, deadline=rc.deadline())
        assert await cluster_outcome(authority, late) is None
        leader.node.leadership.set(proof)
        await abort_predecessor_checkpoint_for_recovery(leader.ctx, v2, deadline=rc.deadline())
        settled = await cluster_outcome(authority, late)
        assert settled is not None and settled.verdict is CheckpointVerdict.ABORT
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None and audited.recovery.state is PinState.ACTIVE

    run(body)


def test_rb_t53_unrestarted_replacement_boot_assignment() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1,), (1, 1), leader=1)
        old = rc.proc(1)
        cut = await rc.checkpoint(1)
        new = await rc.restart(1)
        await rc.cluster.elect(1)
        assert new.engine.registry().version == 0

        assert await try_rebalance(new.ctx, [1]) == 2
        v2 = await rc.head()
        assert v2.owners == (1, 1) and v2.participants == (new.me,)
        assert new.me != old.me
        assert new.engine.registry().version == 2
        assert new.engine.recovery_checkpoint() == cut
        assert new.engine.cluster_intake_fenced()
        assert await try_rebalance(new.ctx, [1]) is None  # settled: nothing more to do

    run(body)


def test_rb_t70_recovery_pin_states() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        # Active, then Consumed (even after the old checkpoint's capsule is deleted).
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        cut = await rc.checkpoint(1)
        await rc.leave(2)
        leader = rc.proc(1)
        assert await try_rebalance(leader.ctx, [1, 2]) == 2
        v2 = await rc.head()
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None
        assert (audited.recovery.state, audited.recovery.checkpoint) == (PinState.ACTIVE, cut)
        assert audited.active_recovery_leader_proof == leader.controller.capture_leader_proof()

        newer = await rc.checkpoint(1, snapshot_fence(v2))
        decisions = leader.node.authority.require_decisions()
        await store.delete(reference_path(cut))
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None
        assert (audited.recovery.state, audited.recovery.checkpoint) == (PinState.CONSUMED, newer)
        assert audited.recovery.origin == snapshot_fence(v2)
        assert audited.active_recovery_leader_proof is None
        assert await attempt_capsules(decisions, cut.checkpoint_id) == ()

    run(body)


def test_rb_t70_propagated_pin_is_reconciled_by_a_takeover_leader() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2, 3, 4), (1, 2, 3, 1), leader=1)
        cut = await rc.checkpoint(1)
        first = rc.proc(1)
        await rc.leave(3)
        assert await try_rebalance(first.ctx, [1, 2]) == 2
        v2 = await rc.head()
        assert set(v2.owners) == {1, 2}

        # D(3) is recorded while D(2)'s pin is unresolved, and not materialized.
        await rc.leave(2)
        successors = [first.me, rc.proc(4).me]
        proposal = next_for_participants(v2, [1, 4, 1, 4], successors, now_ms=clock.wall_ms())
        d3 = await authorize_recovery_successor(first.ctx, v2, proposal, "node-2 left")
        assert d3.recovery_checkpoint == cut
        audited = await audit_snapshot_authority_outcome(first.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None
        assert audited.recovery.state is PinState.PROPAGATED
        assert audited.propagated_recovery_successor == d3.target
        assert (await rc.head()).assignment_version == 2

        # A takeover leader still at v1 and faulted reconciles D(3) and cold-adopts it.
        takeover = rc.proc(4)
        await takeover.engine.fault_for_recovery_assignment()
        assert takeover.engine.registry().version == 1
        assert takeover.engine.state() is EngineState.FAULTED
        await rc.cluster.elect(4)
        assert await try_rebalance(takeover.ctx, [1, 4]) == 3
        v3 = await rc.head()
        assert snapshot_fence(v3) == d3.target
        assert takeover.engine.registry().version == 3
        assert takeover.engine.recovery_checkpoint() == cut
        audited = await audit_snapshot_authority_outcome(takeover.ctx, v3, deadline=rc.deadline())
        assert audited.recovery is not None and audited.recovery.state is PinState.ACTIVE

    run(body)


@pytest.mark.parametrize("handoff_in_flight", [False, True])
def test_rb_t74_dead_owner_draining_head_rollback(handoff_in_flight: bool) -> None:
    """With `handoff_in_flight` (simulation seeds 1245, 1462): the drain's handoff checkpoint
    wrote its capsule under v1 and never decided. Recovery from the rollback settles it as Abort
    like a predecessor attempt (it is older than the predecessor); it used to count as "neither
    the recovery predecessor nor its target" and fail every recovery attempt."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        cut = await rc.checkpoint(1)
        leader = rc.proc(1)
        proof = leader.controller.capture_leader_proof()
        assert proof is not None
        drain = next_draining(v1, [1, 1], [leader.me], proof, now_ms=clock.wall_ms())
        assert isinstance(await rc.cluster.snapshots.save_if_version(drain, 1), Rotated)
        handoff = cut.checkpoint_id + 1
        if handoff_in_flight:
            await _in_flight(rc, 1, handoff)  # fenced by v1, the drain's predecessor
        await rc.die(2)
        proof = await rc.cluster.elect(1)

        assert await try_rebalance(leader.ctx, [1]) == 2
        rollback = await rc.head()
        assert not rollback.draining
        assert rollback.owners == v1.owners and rollback.participants == v1.participants
        abort = await assignment_drain_decision(leader.node.authority, 2)
        assert abort is not None and abort.verdict is AssignmentVerdict.ABORT
        assert leader.engine.registry().version == 2
        assert leader.engine.cluster_intake_fenced()
        assert leader.controller.certify_owner_map(2) is None
        assert leader.engine.installed_fence() is None

        # The next attempt recovers the dead owner from the rollback, restoring the same cut.
        assert await try_rebalance(leader.ctx, [1]) == 3
        v3 = await rc.head()
        assert v3.owners == (1, 1) and v3.participants == (leader.me,)
        decision = await assignment_recovery_decision(leader.node.authority, 3)
        assert decision is not None and decision.recovery_checkpoint == cut
        assert decision.predecessor == snapshot_fence(rollback)
        aborted = await cluster_outcome(leader.node.authority, handoff)
        if handoff_in_flight:
            assert aborted is not None and aborted.verdict is CheckpointVerdict.ABORT
            assert aborted.assignment_fence == snapshot_fence(rollback)  # the predecessor's
            assert aborted.recovery_capsule is None
        else:
            assert aborted is None
        assert leader.engine.registry().version == 3
        assert leader.engine.recovery_checkpoint() == cut

    run(body)


def test_recovery_audit_rejects_a_bare_successor() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        await rc.checkpoint(1)
        leader = rc.proc(1)
        bare = next_for_participants(v1, [1, 1], [leader.me], now_ms=clock.wall_ms())
        assert isinstance(await rc.cluster.snapshots.save_if_version(bare, 1), Rotated)
        with raises_because(CorruptRecord, Refusal.NO_AUTHORITY_DECISION) as audited:
            await audit_snapshot_authority_outcome(leader.ctx, bare, deadline=rc.deadline())
        assert audited.value.key == snapshot_path(2)
        with raises_because(CorruptRecord, Refusal.NO_AUTHORITY_DECISION) as attempted:
            await try_rebalance(leader.ctx, [1])
        assert attempted.value.key == snapshot_path(2)

    run(body)


def test_rb14_owner_lost_before_any_checkpoint_recovers_to_the_initial_state() -> None:
    """LA-20: no cluster checkpoint ever committed, so the recovery decision names the initial
    state (nothing committed exists to restore or to lose): the leader restores empty, the
    predecessor can never commit afterwards, and the target's first Commit consumes the pin."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        await rc.leave(2)
        leader = rc.proc(1)
        authority = leader.node.authority
        assert await highest_cluster_committed_outcome(authority) is None

        assert await try_rebalance(leader.ctx, [1, 2]) == 2

        decision = await assignment_recovery_decision(authority, 2)
        assert decision is not None and decision.recovery_checkpoint is None
        v2 = await rc.head()
        assert v2.owners == (1, 1) and decision.target == snapshot_fence(v2)
        assert leader.engine.registry().version == 2
        assert leader.engine.recovery_checkpoint() is INITIAL_STATE
        assert not leader.controller.is_recovering()
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None and audited.recovery.state is PinState.ACTIVE
        assert audited.recovery.checkpoint is None
        assert audited.recovery.restore_cut is INITIAL_STATE
        # The pin on v2 (initial state) refuses a Commit under the predecessor v1.
        stale = LeaderCheckpointer(  # a v1 checkpoint that was still running
            authority.require_decisions(),
            authority,
            leader.controller.capture_leader_proof,
            owners_of=lambda fence: v1.owners,
        )
        late = await stale(snapshot_fence(v1), None, deadline=rc.deadline())
        # Refused by the pin on v2 (Refused: the authority, `authority.cluster_outcomes`).
        assert not late.success and isinstance(late.error, Refused)
        assert await highest_cluster_committed_outcome(authority) is None
        # A checkpoint under v2 commits and consumes the pin.
        cut = await rc.checkpoint(1)
        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None and audited.recovery.state is PinState.CONSUMED
        assert audited.recovery.checkpoint == cut

    run(body)


def test_rb14_portable_cut_validation() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = await rc.head()
        cut = await rc.checkpoint(1)
        authority = rc.proc(1).node.authority
        loaded = await cluster_outcome_with_recovery_capsule(authority, cut.epoch)
        assert loaded is not None
        outcome, index = loaded
        assert index is not None
        fence = snapshot_fence(v1)
        assert validate_portable_recovery_cut(outcome, index, cut, fence) == fence
        later = msgspec.structs.replace(fence, assignment_version=2)
        assert validate_portable_recovery_cut(outcome, index, cut, later) == fence
        earlier_map = msgspec.structs.replace(fence, assignment_digest=bytes(range(1, 33)))
        rejected = [
            (
                msgspec.structs.replace(index, portable=False),
                cut,
                fence,
                Refused,
                Refusal.CUT_NOT_PORTABLE,
            ),
            (
                index,
                msgspec.structs.replace(cut, sha256="0" * 64),
                fence,
                CorruptRecord,
                Refusal.CUT_OTHER_INDEX,
            ),
            (index, cut, earlier_map, Refused, Refusal.CUT_ORIGIN_NOT_PREDECESSOR),
            (
                index,
                cut,
                msgspec.structs.replace(fence, vnode_count=4),
                Refused,
                Refusal.CUT_VNODE_COUNTS_DIFFER,
            ),
        ]
        for bad_index, ref, predecessor, kind, why in rejected:
            with raises_because(kind, why):
                validate_portable_recovery_cut(outcome, bad_index, ref, predecessor)
        newer_origin = msgspec.structs.replace(index, assignment_fence=later)
        with raises_because(Refused, Refusal.CUT_ORIGIN_NEWER):
            validate_portable_recovery_cut(
                msgspec.structs.replace(outcome, assignment_fence=later), newer_origin, cut, fence
            )

    run(body)


def test_abort_decided_over_an_active_recovery_pin_is_finished_after_a_crash() -> None:
    """The drain Abort of v3 moved the recovery pin of v2 on to the rollback (PROPAGATED): a
    leader that crashed before materializing it can still audit v2 and finish the Abort."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2, 3), (1, 2), leader=1)
        cut = await rc.checkpoint(1)
        await rc.leave(2)
        leader = rc.proc(1)
        assert await try_rebalance(leader.ctx, [1, 2]) == 2
        leader.controller.set_recovering(False)  # the coordinated-recovery Release
        v2 = await rc.head()
        proof = leader.controller.capture_leader_proof()
        assert proof is not None
        joiner = rc.proc(3).me
        drain = next_draining(v2, [1, 3], [leader.me, joiner], proof, now_ms=clock.wall_ms())
        assert isinstance(await rc.cluster.snapshots.save_if_version(drain, 2), Rotated)
        assert drain.drain_transition is not None
        abort = new_drain_decision(drain.drain_transition, proof, AssignmentVerdict.ABORT)
        authority = leader.node.authority
        await record_assignment_drain_decision(authority, proof, abort, deadline=rc.deadline())

        audited = await audit_snapshot_authority_outcome(leader.ctx, v2, deadline=rc.deadline())
        assert audited.recovery is not None
        assert audited.recovery.state is PinState.PROPAGATED
        assert audited.recovery.checkpoint == cut
        assert audited.propagated_recovery_successor == rollback_fence(abort)

        assert await try_rebalance(leader.ctx, [1]) == 3
        rollback = await rc.head()
        assert not rollback.draining and rollback.owners == v2.owners
        assert rollback.participants == v2.participants

    run(body)
