"""`StoreClusterController`'s slots (RB §6.3, RB §2.7, RB §4.6): the in-memory drain
transition slot, the durable adoption reports with the owner certificate, and the durable
drain acks with every refusal of `announce_drain_ack` and every bullet of the ack quorum, over
memory:// and file://."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from laminar_cluster.assignment.model import aborted_target, next_draining, snapshot_fence
from laminar_cluster.assignment.snapshot import Rotated
from laminar_cluster.authority.assignment_decisions import (
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import Fenced, InvalidArgument, Refused
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition, AssignmentVerdict
from laminar_cluster.rebalance.audit.owner_certificate import read_owner_certificate
from laminar_cluster.rebalance.cluster.slots import read_drain_acks, write_process_slot
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption, DrainAck
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectStore
from tests.rebalance.cluster_support import PROCESS_TTL_S, Cluster
from tests.rebalance.refusal_support import raises_because

pytestmark = pytest.mark.parametrize("backend", ["memory", "file"])
replace = msgspec.structs.replace
V1_OWNERS = (1, 2, 1, 2)
V2_OWNERS = (1, 2, 3, 2)


async def started(store: ObjectStore, nodes: tuple[int, ...] = (1, 2, 3)) -> Cluster:
    return await Cluster.start(store, SimulatedClock(seed=7), nodes)


async def draining_v2(cluster: Cluster) -> AssignmentDrainTransition:
    """Node 1 leads; v1 = {1, 2}; draining v2 adds node 3. Returns its transition."""
    proof = await cluster.elect(1)
    v1 = await cluster.seed(V1_OWNERS)
    draining = next_draining(
        v1, V2_OWNERS, cluster.participants(V2_OWNERS), proof, now_ms=cluster.clock.wall_ms()
    )
    assert isinstance(await cluster.snapshots.save_if_version(draining, 1), Rotated)
    assert draining.drain_transition is not None
    return draining.drain_transition


async def ack(cluster: Cluster, node: int, transition: AssignmentDrainTransition) -> None:
    controller = cluster.controller(node)
    controller.publish_checkpoint_drain_transition(transition)
    await controller.announce_drain_ack(transition, deadline=cluster.deadline())


async def quorum(cluster: Cluster, transition: AssignmentDrainTransition, node: int = 1) -> bool:
    controller = cluster.controller(node)
    return await controller.drain_ack_quorum_reached(transition, deadline=cluster.deadline())


def test_transition_slot(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        controller = cluster.controller(2)
        assert controller.checkpoint_drain_transition() is None
        controller.publish_checkpoint_drain_transition(transition)
        assert controller.checkpoint_drain_transition() == transition
        other = replace(transition, leader=replace(transition.leader, fencing_token=99))
        assert not controller.clear_checkpoint_drain_transition_if_matches(other)
        assert controller.checkpoint_drain_transition() == transition
        assert controller.clear_checkpoint_drain_transition_if_matches(transition)
        assert controller.checkpoint_drain_transition() is None

    asyncio.run(main())


# -- durable slots: adoption reports ---------------------------------------------------------


def test_adoption_reports_and_the_owner_complete_fence(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        v1 = await cluster.seed(V1_OWNERS)
        fence = snapshot_fence(v1)

        def report(node: int) -> CheckpointAssignmentAdoption:
            return CheckpointAssignmentAdoption(
                version=1,
                participant=cluster.node(node).participant,
                assignment_version=1,
                vnode_count=fence.vnode_count,
                assignment_digest=fence.assignment_digest,
                vnode_state_ready=node != 3,
            )

        for node in (1, 2, 3):  # node 3 owns nothing and still reports (topology observed)
            await cluster.controller(node).announce_adopted_assignment(
                report(node), deadline=cluster.deadline()
            )
        reports = await cluster.controller(1).read_adopted_assignments(deadline=cluster.deadline())
        assert reports == (report(1), report(2), report(3))
        with pytest.raises(InvalidArgument, match="is not this process's"):
            await cluster.controller(1).announce_adopted_assignment(
                report(2), deadline=cluster.deadline()
            )
        registry = RegistrySnapshot(version=1, owners=V1_OWNERS)
        controller = cluster.controller(1)
        computed = await read_owner_certificate(
            controller, registry, v1.participants, cluster.deadline()
        )
        assert computed == fence
        # A restart of node 2: its new boot has not reported; the roster changed.
        await cluster.restart(2)
        await cluster.refresh()
        computed = await read_owner_certificate(
            controller, registry, v1.participants, cluster.deadline()
        )
        assert computed is None
        # A process whose lease died cannot report.
        cluster.stop(3)
        await cluster.advance(PROCESS_TTL_S + 1)
        with raises_because(Refused, Refusal.PROCESS_LEASE_NOT_LIVE):
            await cluster.controller(3).announce_adopted_assignment(
                report(3), deadline=cluster.deadline()
            )

    asyncio.run(main())


# -- durable slots: drain acks and the quorum ------------------------------------------------


def test_drain_ack_happy_path_and_quorum(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        cluster.controller(1).publish_checkpoint_drain_transition(transition)
        assert not await quorum(cluster, transition)  # no acks yet
        await ack(cluster, 1, transition)
        assert not await quorum(cluster, transition)  # node 2 has not acked
        await ack(cluster, 2, transition)
        acks = await read_drain_acks(store, cluster.clock, deadline=cluster.deadline())
        assert [a.participant for a in acks] == [cluster.node(n).participant for n in (1, 2)]
        assert await quorum(cluster, transition)
        # Acks of other nodes are ignored (node 3 is a target-only joiner).
        joiner_ack = DrainAck(
            version=1, participant=cluster.node(3).participant, transition=transition
        )
        await write_process_slot(store, cluster.clock, joiner_ack, deadline=cluster.deadline())
        assert await quorum(cluster, transition)
        # The leader's own installed transition is required.
        cluster.controller(1).publish_checkpoint_drain_transition(None)
        assert not await quorum(cluster, transition)

    asyncio.run(main())


def test_rb9_drain_ack_refusals(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        deadline = cluster.deadline()
        two = cluster.controller(2)
        bad = replace(transition, leader=replace(transition.leader, fencing_token=0))
        two.publish_checkpoint_drain_transition(bad)
        with pytest.raises(InvalidArgument):
            await two.announce_drain_ack(bad, deadline=deadline)
        three = cluster.controller(3)
        three.publish_checkpoint_drain_transition(transition)
        with raises_because(Refused, Refusal.NOT_A_PREDECESSOR_PARTICIPANT):
            await three.announce_drain_ack(transition, deadline=deadline)
        two.publish_checkpoint_drain_transition(None)
        with raises_because(Refused, Refusal.TRANSITION_DIFFERS):
            await two.announce_drain_ack(transition, deadline=deadline)
        # A new leader term: the durable lease no longer matches the transition's leader.
        two.publish_checkpoint_drain_transition(transition)
        await cluster.elect(1)
        with raises_because(Refused, Refusal.DRAIN_LEADER_SUPERSEDED):
            await two.announce_drain_ack(transition, deadline=cluster.deadline())
        assert await read_drain_acks(store, cluster.clock, deadline=cluster.deadline()) == ()

    asyncio.run(main())


def test_drain_ack_refused_for_a_stale_or_dead_process(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        old_two = cluster.controller(2)
        old_two.publish_checkpoint_drain_transition(transition)
        await cluster.restart(2)  # the old process's lease is still live locally
        with raises_because(Fenced, None):
            await old_two.announce_drain_ack(transition, deadline=cluster.deadline())
        one = cluster.controller(1)
        one.publish_checkpoint_drain_transition(transition)
        cluster.stop(1)
        await cluster.advance(PROCESS_TTL_S + 1)
        with raises_because(Refused, Refusal.PROCESS_LEASE_NOT_LIVE):
            await one.announce_drain_ack(transition, deadline=cluster.deadline())

    asyncio.run(main())


def test_rb9_quorum_is_broken_by_a_restart(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        await ack(cluster, 1, transition)
        await ack(cluster, 2, transition)
        assert await quorum(cluster, transition)
        await cluster.restart(2)
        assert not await quorum(cluster, transition)

    asyncio.run(main())


def test_quorum_needs_the_same_leader_the_exact_acks_and_no_decision(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        await ack(cluster, 1, transition)
        # Node 2's slot holds an ack of a different transition: it does not count.
        other = replace(transition, leader=replace(transition.leader, fencing_token=77))
        stale = DrainAck(version=1, participant=cluster.node(2).participant, transition=other)
        await write_process_slot(store, cluster.clock, stale, deadline=cluster.deadline())
        assert not await quorum(cluster, transition)
        await ack(cluster, 2, transition)
        assert await quorum(cluster, transition)
        # A recorded decision for the target version ends the quorum.
        proof = transition.leader
        decision = new_drain_decision(transition, proof, AssignmentVerdict.ABORT)
        authority = cluster.node(1).authority
        await record_assignment_drain_decision(
            authority, proof, decision, deadline=cluster.deadline()
        )
        assert not await quorum(cluster, transition)
        # Once finalized, the head is no longer the draining snapshot either.
        draining = await cluster.snapshots.load_version(2)
        v1 = await cluster.snapshots.load_version(1)
        assert draining is not None and v1 is not None
        rollback = aborted_target(draining, v1, now_ms=cluster.clock.wall_ms())
        await cluster.snapshots.finalize_drain(draining, rollback, decision)
        assert not await quorum(cluster, transition)

    asyncio.run(main())


def test_quorum_needs_the_leader_term_that_opened_the_drain(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        await ack(cluster, 1, transition)
        await ack(cluster, 2, transition)
        assert await quorum(cluster, transition)
        new_proof: LeaderProof = await cluster.elect(2)  # a takeover by node 2
        assert new_proof != transition.leader
        assert not await quorum(cluster, transition)

    asyncio.run(main())


def test_rb9_ack_quorum_is_exactly_the_predecessor_roster(store: ObjectStore) -> None:
    """Predecessor {1, 2}, target {1, 2, 3}: the joiner can never ack and is never needed (a
    durable ack of it changes nothing); the acks of 1 and 2 make the quorum; node 2's restart
    breaks it although its ack stays durable, and the new boot cannot ack in the old boot's
    place."""

    async def main() -> None:
        cluster = await started(store)
        transition = await draining_v2(cluster)
        joiner = cluster.controller(3)
        joiner.publish_checkpoint_drain_transition(transition)
        with raises_because(Refused, Refusal.NOT_A_PREDECESSOR_PARTICIPANT):
            await joiner.announce_drain_ack(transition, deadline=cluster.deadline())
        await ack(cluster, 1, transition)
        assert not await quorum(cluster, transition)
        await ack(cluster, 2, transition)
        assert await quorum(cluster, transition)
        stray = DrainAck(version=1, participant=cluster.node(3).participant, transition=transition)
        await write_process_slot(store, cluster.clock, stray, deadline=cluster.deadline())
        assert await quorum(cluster, transition)  # a joiner's ack changes nothing

        old = cluster.node(2).participant
        await cluster.restart(2)
        await cluster.refresh()
        acks = await read_drain_acks(store, cluster.clock, deadline=cluster.deadline())
        assert old in [a.participant for a in acks]  # still durable, no longer counted
        assert not await quorum(cluster, transition)
        replacement = cluster.controller(2)
        replacement.publish_checkpoint_drain_transition(transition)
        with raises_because(Refused, Refusal.NOT_A_PREDECESSOR_PARTICIPANT):
            await replacement.announce_drain_ack(transition, deadline=cluster.deadline())
        assert not await quorum(cluster, transition)

    asyncio.run(main())
