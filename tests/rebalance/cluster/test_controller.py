"""`StoreClusterController` (RB §6.3, RB §9): identity, membership, process fencing,
quarantine, leadership, recovery mode and the in-memory fence slot, over memory:// and file://.
The durable slots and the drain-ack quorum are in test_controller_slots.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import Fenced, InvalidArgument, Refused
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.manager import LeaderLeaseManager, LeaseManagerConfig
from laminar_cluster.lease.validate_decisions import process_fence_problem
from laminar_cluster.membership import (
    Discovery,
    NodeState,
    ProcessFenced,
    ProcessLeaseHolder,
    activate,
    node_lease_path,
    read_node_record,
)
from laminar_cluster.rebalance.cluster.controller import Leadership, StoreClusterController
from laminar_cluster.rebalance.interfaces import ClusterController, MembersWatch
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.rebalance.cluster_support import PROCESS_TTL_S, Cluster
from tests.rebalance.refusal_support import raises_because

pytestmark = pytest.mark.parametrize("backend", ["memory", "file"])
replace = msgspec.structs.replace
V1_OWNERS = (1, 2, 1, 2)


async def started(store: ObjectStore, nodes: tuple[int, ...] = (1, 2, 3)) -> Cluster:
    return await Cluster.start(store, SimulatedClock(seed=7), nodes)


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait in real time (file:// I/O runs in threads) until `condition` holds."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def stepping(clock: SimulatedClock, condition: Callable[[], bool], what: str) -> None:
    """Move the clock in quarter seconds (at most 8 s) until `condition` holds."""
    for _ in range(32):
        if condition():
            return
        await clock.step(0.25)
        for _ in range(20):  # let file:// reads in threads finish at this instant
            if condition():
                return
            await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


# -- identity ------------------------------------------------------------------------------


def test_identity_and_protocols(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        node = cluster.node(1)
        controller = node.controller
        satisfies: ClusterController = controller
        watch: MembersWatch = controller.members_watch()
        assert satisfies is controller and watch.version() == 1
        assert controller.boot == node.holder.record.lease.owner
        assert controller.local_participant() == FenceParticipant(
            node_id=1, boot_incarnation=controller.boot
        )
        assert controller.process_lease_is_live() and not controller.is_recovering()
        assert controller.checkpoint_authority() is node.authority
        assert controller.process_fencing_deadline(3.0) == cluster.clock.monotonic() + 3.0
        with pytest.raises(InvalidArgument, match="not 2"):
            StoreClusterController(
                store=store,
                clock=cluster.clock,
                node_id=2,
                holder=node.holder,
                discovery=node.discovery,
                authority=node.authority,
                snapshots=cluster.snapshots,
                leadership=node.leadership,
            )
        unacquired = ProcessLeaseHolder(store, cluster.clock, 9, ttl_s=PROCESS_TTL_S)
        with pytest.raises(InvalidArgument, match="not acquired"):
            StoreClusterController(
                store=store,
                clock=cluster.clock,
                node_id=9,
                holder=unacquired,
                discovery=node.discovery,
                authority=node.authority,
                snapshots=cluster.snapshots,
                leadership=node.leadership,
            )

    asyncio.run(main())


# -- membership ----------------------------------------------------------------------------


def test_members_watch_moves_only_on_signature_changes(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        watch = controller.members_watch()
        assert watch.version() == 1
        assert [(m.node_id, m.state) for m in watch.current()] == [
            (1, "active"),
            (2, "active"),
            (3, "active"),
        ]
        # Renewals change the records, not what peers see: no new version.
        await cluster.renew()
        await controller.refresh_members(deadline=cluster.deadline())
        assert watch.version() == 1
        assert await watch.changed(0) == 1  # a change already seen returns at once
        async with asyncio.TaskGroup() as group:
            waiter = group.create_task(watch.changed(1))
            await asyncio.sleep(0)
            assert not waiter.done()
            # ML-14: a new node is in the others' views once its id is in the roster (at its
            # activation; a joining node's record alone waits for the repair listing).
            await cluster.add(4)
            await controller.refresh_members(deadline=cluster.deadline())
        assert waiter.result() == 2 == watch.version()
        assert watch.current()[-1].node_id == 4 and watch.current()[-1].state == "active"
        # A view without this node itself is refused and publishes nothing (RB §9).
        await store.delete(node_lease_path(1))
        with raises_because(Refused, Refusal.SELF_NOT_A_MEMBER):
            await controller.refresh_members(deadline=cluster.deadline())
        assert watch.version() == 2 and len(watch.current()) == 4

    asyncio.run(main())


def test_run_polls_until_shutdown_and_survives_errors(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2))
        clock = cluster.clock
        node = cluster.node(1)
        faulty = FaultyStore(store, clock=clock, seed=3)
        faulty.fail_next(FaultKind.BEFORE, op="list", key_prefix="membership/")
        controller = StoreClusterController(
            store=store,
            clock=clock,
            node_id=1,
            holder=node.holder,
            discovery=Discovery(faulty, clock),
            authority=node.authority,
            snapshots=cluster.snapshots,
            leadership=node.leadership,
        )
        watch = controller.members_watch()
        shutdown = asyncio.Event()
        failed = faulty.stats.injected
        async with asyncio.TaskGroup() as group:
            task = group.create_task(controller.run(shutdown, poll_s=1.0))
            await eventually(lambda: failed[FaultKind.BEFORE] == 1, "the first poll failed")
            assert watch.version() == 0 and not task.done()  # only logged
            await stepping(clock, lambda: watch.version() == 1, "a later poll published")
            await cluster.add(3)
            await stepping(clock, lambda: watch.version() == 2, "a later poll saw node 3")
            shutdown.set()
        assert task.done() and task.exception() is None
        with raises_because(Refused, Refusal.MEMBERS_WATCH_CLOSED):
            await watch.changed(2)

    asyncio.run(main())


def test_participant_incarnations_come_from_live_members(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        deadline = cluster.deadline()
        expected = cluster.participants((1, 2, 3))
        assert await controller.recovery_participant_incarnations([3, 1, 2], deadline=deadline) == (
            expected
        )
        cluster.stop(3)
        await cluster.advance(PROCESS_TTL_S + 1)
        deadline = cluster.deadline()
        with raises_because(Refused, Refusal.NO_LIVE_INCARNATION):
            await controller.recovery_participant_incarnations([1, 2, 3], deadline=deadline)
        available = await controller.available_recovery_participant_incarnations(
            [1, 2, 3], deadline=deadline
        )
        assert available == expected[:2]

    asyncio.run(main())


def test_assignable_instances_are_active_members_only(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        await cluster.add(4, active=False)  # joining: not assignable
        await cluster.node(2).holder.renew(deadline=cluster.deadline(), state=NodeState.DRAINING)
        await cluster.refresh()
        assert cluster.controller(1).assignable_instances() == (1, 3)
        assert cluster.controller(1).checkpoint_instances() == (1, 2, 3)
        # Self is assignable only while active.
        await cluster.node(1).holder.renew(deadline=cluster.deadline(), state=NodeState.DRAINING)
        await cluster.refresh()
        assert cluster.controller(1).assignable_instances() == (3,)

    asyncio.run(main())


def test_verify_current_process_incarnation(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        old2, p3 = cluster.node(2).participant, cluster.node(3).participant
        deadline = cluster.deadline()
        assert await controller.verify_current_process_incarnation(old2, deadline=deadline)
        await cluster.restart(2)
        assert not await controller.verify_current_process_incarnation(old2, deadline=deadline)
        new2 = cluster.node(2).participant
        assert await controller.verify_current_process_incarnation(new2, deadline=deadline)
        await cluster.node(3).holder.renew(deadline=deadline, state=NodeState.LEFT)
        assert not await controller.verify_current_process_incarnation(p3, deadline=deadline)
        gone = FenceParticipant(node_id=8, boot_incarnation=p3.boot_incarnation)
        assert not await controller.verify_current_process_incarnation(gone, deadline=deadline)

    asyncio.run(main())


# -- process fencing -----------------------------------------------------------------------


def test_fencing_a_renewing_process_fails_with_renewed(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        p3 = cluster.node(3).participant
        # Renewing throughout; even after more than a ttl it is never fenced.
        await cluster.advance(PROCESS_TTL_S * 2)
        with raises_because(Refused, Refusal.PROCESS_RENEWED):
            await cluster.controller(1).fence_process_incarnation(p3, deadline=cluster.deadline())
        record = await read_node_record(store, 3)
        assert record is not None and record.record.lease.owner == p3.boot_incarnation
        # Silent, but for less than a full ttl: still refused.
        cluster.stop(3)
        await cluster.advance(PROCESS_TTL_S / 2)
        with raises_because(Refused, Refusal.PROCESS_RENEWED):
            await cluster.controller(1).fence_process_incarnation(p3, deadline=cluster.deadline())

    asyncio.run(main())


def test_fencing_a_dead_process_succeeds_and_its_zombie_renewal_fails(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2))
        # Node 3 is a process whose own clock is paused: it still believes its lease is live.
        paused = SimulatedClock(seed=99)
        zombie = ProcessLeaseHolder(store, paused, 3, ttl_s=PROCESS_TTL_S)
        await zombie.acquire(deadline=1e9)
        await activate(zombie, deadline=1e9)
        p3 = FenceParticipant(node_id=3, boot_incarnation=zombie.record.lease.owner)
        await cluster.refresh()
        await cluster.advance(PROCESS_TTL_S + 1)
        controller = cluster.controller(1)
        fence = await controller.fence_process_incarnation(p3, deadline=cluster.deadline())
        assert process_fence_problem(fence) is None
        assert fence.predecessor == zombie.record.lease
        stored = await read_node_record(store, 3)
        assert stored is not None and stored.record.lease == fence.successor
        assert stored.record.state is NodeState.LEFT
        assert zombie.is_live()  # its own clock did not move ...
        with pytest.raises(ProcessFenced, match="superseded"):  # ... but its CAS loses
            await zombie.renew(deadline=1e9)
        after = await read_node_record(store, 3)
        assert after is not None and after.record == stored.record
        # Fencing again (a retry) proves the same takeover from the observed predecessor.
        again = await controller.fence_process_incarnation(p3, deadline=cluster.deadline())
        assert again == fence

    asyncio.run(main())


def test_fencing_a_process_that_left_needs_no_wait(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        p3 = cluster.node(3).participant
        await cluster.node(3).holder.renew(deadline=cluster.deadline(), state=NodeState.LEFT)
        fence = await cluster.controller(1).fence_process_incarnation(
            p3, deadline=cluster.deadline()
        )
        assert fence.predecessor.owner == p3.boot_incarnation
        assert process_fence_problem(fence) is None

    asyncio.run(main())


def test_fencing_a_restarted_process_uses_the_recorded_takeover(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        old2, old3 = cluster.node(2), cluster.node(3)
        observed2 = old2.holder.record.lease
        # Restarted and not yet renewed: an immediate takeover (seq + 1, term + 1).
        await cluster.restart(2, active=False)
        fence = await controller.fence_process_incarnation(
            old2.participant, deadline=cluster.deadline()
        )
        assert fence.predecessor == observed2
        assert fence.successor == cluster.node(2).holder.record.lease
        # Restarted and renewed since: the record still holds the exact takeover (ML-11).
        last3 = old3.holder.record.lease
        await cluster.restart(3)
        await cluster.advance(PROCESS_TTL_S)
        fence = await controller.fence_process_incarnation(
            old3.participant, deadline=cluster.deadline()
        )
        assert process_fence_problem(fence) is None
        assert fence.predecessor == last3
        current = cluster.node(3).holder.record
        assert fence.successor.owner == current.lease.owner
        assert fence.successor.seq < current.lease.seq
        # A boot that never held node 2: neither observed nor among its takeovers.
        stranger = FenceParticipant(node_id=2, boot_incarnation=old3.boot)
        with raises_because(Refused, Refusal.TAKEOVER_NEVER_OBSERVED):
            await controller.fence_process_incarnation(stranger, deadline=cluster.deadline())

    asyncio.run(main())


# -- quarantine, leadership, recovery mode -------------------------------------------------


def test_quarantine_is_per_exact_boot(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        old2 = cluster.node(2).participant
        assert not controller.is_unresponsive(2) and controller.admit_successor_process(old2)
        controller.note_unresponsive(2)
        controller.note_unresponsive(9)  # not a member: nothing to quarantine
        assert controller.is_unresponsive(2) and not controller.is_unresponsive(9)
        assert not controller.admit_successor_process(old2)
        await cluster.restart(2)
        await cluster.refresh()
        new2 = cluster.node(2).participant
        assert not controller.is_unresponsive(2)
        assert controller.admit_successor_process(new2)
        assert controller.admit_successor_process(old2)  # the new boot cleared the quarantine

    asyncio.run(main())


def test_leadership_follows_the_injected_grant(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(1)
        assert not controller.is_leader() and controller.capture_leader_proof() is None
        proof = await cluster.elect(1)
        assert controller.is_leader() and controller.capture_leader_proof() == proof
        assert controller.proof_is_live(proof)
        assert not controller.proof_is_live(replace(proof, fencing_token=proof.fencing_token + 1))
        assert not cluster.controller(2).is_leader()
        assert not cluster.controller(2).proof_is_live(proof)
        # The real lease manager satisfies `Leadership`; before it runs it grants nothing.
        node = cluster.node(2)
        config = LeaseManagerConfig(ttl_s=cluster.authority_ttl_s, renew_interval_s=1.0)
        manager = LeaderLeaseManager(node.authority, node.owner, config, cluster.clock)
        leadership: Leadership = manager
        assert not leadership.grants_leadership() and leadership.proof() is None

    asyncio.run(main())


def test_recovery_mode_is_forced_while_the_process_lease_is_dead(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(2)
        controller.set_recovering(True)
        assert controller.is_recovering()
        controller.set_recovering(False)
        assert not controller.is_recovering()
        cluster.stop(2)
        await cluster.advance(PROCESS_TTL_S + 1)
        assert not controller.process_lease_is_live() and controller.is_recovering()

    asyncio.run(main())


def test_recovery_faults_carry_the_process_term_and_a_rising_request(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        controller = cluster.controller(2)
        with pytest.raises(Fenced):  # no authority head yet
            await controller.publish_local_recovery_fault(deadline=cluster.deadline())
        await cluster.elect(1)
        for expected_request in (2, 3):
            await controller.publish_local_recovery_fault(deadline=cluster.deadline())
            head = await cluster.node(1).authority.load_record()
            assert head is not None
            (slot,) = head.recovery_fault_slots
            assert slot.publisher.participant == controller.local_participant()
            assert slot.publisher.process_term == controller.process_term
            assert slot.request_sequence == expected_request and slot.active
        # A restarted process of node 2 reports; the old one is superseded.
        await cluster.restart(2)
        await cluster.controller(2).publish_local_recovery_fault(deadline=cluster.deadline())
        with raises_because(Fenced, Refusal.NEWER_PROCESS_TERM):
            await controller.publish_local_recovery_fault(deadline=cluster.deadline())

    asyncio.run(main())


# -- in-memory fence and transition slots --------------------------------------------------


def test_fence_slot_rules(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store)
        v1 = await cluster.seed(V1_OWNERS)
        fence = snapshot_fence(v1)
        one, three = cluster.controller(1), cluster.controller(3)
        one.publish_checkpoint_assignment_fence(fence)
        three.publish_checkpoint_assignment_fence(fence)
        assert one.certify_owner_map(1) == fence
        assert one.certify_owner_map(2) is None
        assert three.certify_owner_map(1) == fence  # does not name node 3 at all
        # A fence naming another boot of this node.
        other_boot = FenceParticipant(node_id=3, boot_incarnation=cluster.node(1).boot)
        foreign = replace(fence, participants=(cluster.node(2).participant, other_boot))
        three.publish_checkpoint_assignment_fence(foreign)
        assert three.certify_owner_map(1) is None
        # Not canonical.
        one.publish_checkpoint_assignment_fence(replace(fence, participants=()))
        assert one.certify_owner_map(1) is None
        one.publish_checkpoint_assignment_fence(None)
        assert one.certify_owner_map(1) is None
        # A participant that is no longer checkpoint-capable (dead), then this lease dead.
        one.publish_checkpoint_assignment_fence(fence)
        cluster.stop(2)
        await cluster.advance(PROCESS_TTL_S + 1)
        assert one.certify_owner_map(1) is None
        cluster.stop(1)
        await cluster.advance(PROCESS_TTL_S + 1)
        one.publish_checkpoint_assignment_fence(fence)
        assert one.certify_owner_map(1) is None

    asyncio.run(main())
