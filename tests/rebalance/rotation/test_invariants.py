"""Rebalance invariants of the leader's rotation (docs/protocols/rebalance.md): RB-3 (a restart
needs a new version), RB-6 (one decision per version, recorded before any terminal), RB-7
(Commit needs the full ack quorum, then a handoff under the predecessor fence) and RB-19 (one
terminal per draining version, the recorded verdict's). Real controllers, authority, snapshot
store and BaseEngines on memory://, a simulated clock."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from laminar_cluster.assignment.model import (
    committed_target,
    next_draining,
    next_for_participants,
    snapshot_fence,
)
from laminar_cluster.assignment.paths import FINALIZATIONS_PREFIX, finalization_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.authority.assignment_decisions import (
    DecisionConflict,
    assignment_drain_decision,
    new_drain_decision,
    new_recovery_decision,
    record_assignment_drain_decision,
    record_assignment_recovery_decision,
)
from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_outcome,
    highest_cluster_committed_outcome,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    CorruptRecord,
    Fenced,
    InvalidArgument,
    LaminarError,
    Refused,
)
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition, AssignmentVerdict
from laminar_cluster.rebalance.audit.binding import assignment_binds_local_process
from laminar_cluster.rebalance.audit.drain import finalized_drain_outcome
from laminar_cluster.rebalance.cluster.slots import read_drain_acks
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.rebalance.interfaces import CheckpointResult, SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.store import ObjectStore, open_store
from tests.rebalance.cluster_support import exists
from tests.rebalance.hooks_support import build
from tests.rebalance.recovery_support import RecoveryCluster, run
from tests.rebalance.refusal_support import raises_because
from tests.rebalance.scenario import Scenario, drive, follower_ack

ABORT, COMMIT = SourceDrainOutcome.ABORT, SourceDrainOutcome.COMMIT
LIVE = FinalizeMode.LIVE
replace = msgspec.structs.replace


def drain_of(snapshot: AssignmentSnapshot) -> AssignmentDrainTransition:
    """The drain transition of draining `snapshot`."""
    assert snapshot.drain_transition is not None
    return snapshot.drain_transition


def test_rb3_a_restarted_node_needs_a_new_version() -> None:
    """Node 2 restarts with rendezvous unchanged: the same map is published again at v2 with
    node 2's new boot, and the old boot can neither run it nor keep running v1's certificate."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        owners = tuple(rendezvous_assignment(4, [1, 2]))
        rc = await RecoveryCluster.start(clock, store, (1, 2), owners, leader=1)
        v1 = await rc.head()
        await rc.checkpoint(1)
        leader, old = rc.proc(1), rc.proc(2)
        assert await try_rebalance(leader.ctx, [1, 2]) is None  # nothing changed: no version
        new = await rc.restart(2)
        assert new.me.node_id == old.me.node_id and new.me != old.me

        assert await try_rebalance(leader.ctx, [1, 2]) == 2
        v2 = await rc.head()
        assert v2.owners == v1.owners and not v2.draining
        assert v2.participants == (leader.me, new.me)
        assert assignment_binds_local_process(v2, new.me)
        assert not assignment_binds_local_process(v2, old.me)
        with raises_because(Refused, Refusal.ANOTHER_BOOT):
            await old.engine.adopt_assignment(v2, deadline=rc.deadline())
        assert old.engine.registry().version == 1
        with raises_because(Refused, Refusal.ANOTHER_BOOT):  # v1 certifies the old boot
            await new.engine.adopt_assignment(v1, deadline=rc.deadline())
        assert await try_rebalance(leader.ctx, [1, 2]) is None  # settled at v2

    run(body)


def test_rb6_one_decision_per_version_before_any_terminal() -> None:
    """Drain v1 -> v2 opened by node 1: a deposed opener records nothing and so materializes
    nothing; the current term's Abort is the one decision of v2, against which another drain
    decision gets the Abort back and a recovery decision is refused, neither appending a
    record; and the store builds no terminal on a decision of another transition."""

    async def main() -> None:
        scenario = await build((1, 2, 3), (1, 2, 3, 1))
        cluster, v1 = scenario.cluster, scenario.v1
        drain = await scenario.drain((1, 2, 1, 2))
        opened = drain_of(drain).leader
        proof = await cluster.elect(2)
        cluster.node(1).leadership.set(opened)  # node 1 still believes it leads
        with pytest.raises(Fenced):
            await finalize_drain_snapshot(scenario.ctx(1), drain, v1, ABORT, None, LIVE)
        authority = cluster.node(2).authority
        assert await assignment_drain_decision(authority, 2) is None
        assert await cluster.snapshots.load() == drain
        assert not await exists(cluster.store, finalization_path(2))

        assert await finalize_drain_snapshot(scenario.ctx(2), drain, v1, ABORT, None, LIVE) == 2
        abort = await assignment_drain_decision(authority, 2)
        assert abort is not None and abort.verdict is AssignmentVerdict.ABORT
        assert abort.leader_proof == proof
        record = await authority.load_record()
        deadline = cluster.deadline()
        other = next_draining(v1, (2, 2, 2, 2), cluster.participants([2]), proof, now_ms=0)
        second = new_drain_decision(drain_of(other), proof, AssignmentVerdict.ABORT)
        recorded = await record_assignment_drain_decision(
            authority, proof, second, deadline=deadline
        )
        assert recorded == DecisionConflict(abort)
        cluster.stop(3)
        await cluster.advance(cluster.process_ttl_s + 1.0)
        gone = await cluster.controller(2).fence_process_incarnation(
            cluster.node(3).participant, deadline=deadline
        )
        proposal = next_for_participants(v1, (1, 2, 1, 2), cluster.participants([1, 2]), now_ms=0)
        ref = await cluster.snapshots.stage_recovery_proposal(proposal)
        recovery = new_recovery_decision(
            snapshot_fence(v1), snapshot_fence(proposal), ref, [gone], None, proof
        )
        with pytest.raises(Refused):
            await record_assignment_recovery_decision(
                authority, proof, recovery, cluster.snapshots, deadline=deadline
            )
        assert await authority.load_record() == record  # neither appended anything
        with pytest.raises(InvalidArgument):
            await cluster.snapshots.finalize_drain(drain, committed_target(drain, now_ms=0), second)

    asyncio.run(main())


class Handoffs:
    """Node 1's checkpointer: records, at each call, which processes had a durable ack of the
    open drain, then runs the real `LeaderCheckpointer` under `shift`
    versions above the fence it was given (0: the predecessor fence itself)."""

    def __init__(self, scenario: Scenario, shift: int = 0) -> None:
        self.scenario, self.shift = scenario, shift
        self.acked: list[set[int]] = []
        node = scenario.cluster.node(1)
        self.inner = LeaderCheckpointer(
            node.authority.require_decisions(),
            node.authority,
            node.controller.capture_leader_proof,
            lambda fence: scenario.engines[1].registry().owners,
        )

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        cluster = self.scenario.cluster
        head = await cluster.snapshots.load()
        assert head is not None and head.draining  # the handoff runs while the drain is open
        acks = await read_drain_acks(cluster.store, cluster.clock, deadline=deadline)
        self.acked.append({a.participant.node_id for a in acks if a.transition == drain_of(head)})
        shifted = replace(fence, assignment_version=fence.assignment_version + self.shift)
        return await self.inner(shifted, transition if self.shift == 0 else None, deadline=deadline)


async def rotate(*, acks: bool, shift: int = 0) -> tuple[Scenario, Handoffs, object]:
    """v1 = rendezvous over {1, 2} on three nodes; node 1 rotates to {1, 2, 3} with node 2
    acking (or not). Returns the scenario, node 1's checkpointer and the rotation's result
    (the settled version, or the LaminarError it raised)."""
    scenario = await Scenario.start(open_store("memory://"), SimulatedClock(seed=5), (1, 2, 3))
    handoffs = Handoffs(scenario, shift)
    scenario.add_engine(1, checkpointer=handoffs)
    await scenario.bring_up(tuple(rendezvous_assignment(4, [1, 2])))
    ack = asyncio.ensure_future(follower_ack(scenario, 2)) if acks else None
    try:
        result: object = await drive(scenario, try_rebalance(scenario.ctx(1), [1, 2, 3]))
    except LaminarError as error:
        result = error
    if ack is not None:
        await ack
    return scenario, handoffs, result


def test_rb7_commit_needs_the_full_quorum_then_a_predecessor_handoff() -> None:
    async def main() -> None:
        # Node 2, a predecessor participant, never acks: no handoff checkpoint, no decision.
        scenario, handoffs, result = await rotate(acks=False)
        assert isinstance(result, Refused) and result.reason is Refusal.ACK_QUORUM_MISSED
        authority = scenario.cluster.node(1).authority
        assert handoffs.acked == []
        assert await assignment_drain_decision(authority, 2) is None
        assert await highest_cluster_committed_outcome(authority) is None

        # Every predecessor acked, but the checkpoint committed under another fence: Abort.
        scenario, handoffs, result = await rotate(acks=True, shift=7)
        assert isinstance(result, CorruptRecord), result
        assert result.reason is Refusal.HANDOFF_NOT_PREDECESSOR_CUT
        decision = await assignment_drain_decision(scenario.cluster.node(1).authority, 2)
        assert decision is not None and decision.verdict is AssignmentVerdict.ABORT

        # The handoff ran only once the whole predecessor roster had acked, under its fence.
        scenario, handoffs, result = await rotate(acks=True)
        assert result == 2 and handoffs.acked == [{1, 2}]
        authority = scenario.cluster.node(1).authority
        decision = await assignment_drain_decision(authority, 2)
        assert decision is not None and decision.verdict is AssignmentVerdict.COMMIT
        assert decision.handoff_checkpoint is not None
        handoff = await cluster_outcome(authority, decision.handoff_checkpoint.epoch)
        v1_fence = decision.transition.predecessor
        assert handoff is not None and handoff.assignment_fence == v1_fence
        # The pin then refuses any further Commit under the predecessor fence.
        late = await handoffs.inner(v1_fence, None, deadline=scenario.cluster.deadline())
        assert not late.success and isinstance(late.error, Refused)

    asyncio.run(main())


def test_rb19_one_terminal_per_draining_version() -> None:
    """The opening term's Commit (node 1) and an Abort under the same term (node 2, which
    holds the proof too) race on draining v2: one decision wins, both calls materialize its
    one terminal and return v2, and nothing changes it afterwards."""

    async def main() -> None:
        scenario = await build((1, 2), (1, 2, 1, 2))
        cluster, v1 = scenario.cluster, scenario.v1
        drain = await scenario.drain((1, 1, 1, 1))
        handoff = await scenario.checkpoint(snapshot_fence(v1))
        cluster.node(2).leadership.set(cluster.controller(1).capture_leader_proof())
        async with asyncio.TaskGroup() as group:
            commit = group.create_task(
                finalize_drain_snapshot(scenario.ctx(1), drain, v1, COMMIT, handoff, LIVE)
            )
            abort = group.create_task(
                finalize_drain_snapshot(scenario.ctx(2), drain, v1, ABORT, None, LIVE)
            )
        assert commit.result() == abort.result() == 2

        finalizations = await cluster.store.list(FINALIZATIONS_PREFIX)
        assert [meta.key for meta in finalizations] == [finalization_path(2)]
        decision = await assignment_drain_decision(cluster.node(1).authority, 2)
        assert decision is not None
        terminal = await cluster.snapshots.load()
        assert terminal is not None and not terminal.draining
        outcome = finalized_drain_outcome(drain_of(drain), terminal)
        assert outcome.value == decision.verdict.value
        for node_id in (1, 2):
            assert scenario.engine(node_id).registry().owners == terminal.owners
        body = (await cluster.store.get(finalization_path(2))).body

        await cluster.advance(1.0)  # a terminal built now would carry another timestamp
        loser = ABORT if decision.verdict is AssignmentVerdict.COMMIT else COMMIT
        retry = await finalize_drain_snapshot(
            scenario.ctx(1), drain, v1, loser, handoff if loser is COMMIT else None, LIVE
        )
        assert retry == 2
        assert (await cluster.store.get(finalization_path(2))).body == body
        assert await cluster.snapshots.load() == terminal

    asyncio.run(main())
