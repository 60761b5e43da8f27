"""Fencing old boots of restarted nodes from the durable takeovers of their lease records
(RB §2.6 `removed_process_fences`, RB §6.3 `fence_process_incarnation`;
ML §8.2; docs/protocols/membership.md ML-11), over memory:// and file://.

A controller's discovery only ever lists current records, so a process started after a node's
restart has never observed that node's old boot: every fence below comes from the record."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.validate_decisions import process_fence_problem
from laminar_cluster.membership import NodeState, read_node_record
from laminar_cluster.membership.records import NODE_TAKEOVERS_MAX
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectStore
from tests.rebalance.cluster_support import PROCESS_TTL_S, Cluster, ClusterNode
from tests.rebalance.refusal_support import raises_because

pytestmark = pytest.mark.parametrize("backend", ["memory", "file"])


async def started(store: ObjectStore, nodes: tuple[int, ...]) -> Cluster:
    return await Cluster.start(store, SimulatedClock(seed=7), nodes)


def _assert_takeover(fence: ProcessLeaseFence, old: ProcessLease, new: ClusterNode) -> None:
    """`fence` is the exact ML §8.2 takeover of `old` (the old boot's last lease) by `new`'s
    start."""
    assert process_fence_problem(fence) is None
    assert fence.predecessor == old
    assert fence.successor.owner == new.boot
    assert fence.successor.term == new.holder.record.lease.term


async def _restart_renewed(cluster: Cluster, node_id: int) -> tuple[ProcessLease, ClusterNode]:
    """Restart `node_id` and let the new boot renew for a while: (old boot's last lease, new)."""
    last = cluster.node(node_id).holder.record.lease
    new = await cluster.restart(node_id)
    await cluster.advance(PROCESS_TTL_S)
    assert new.holder.record.lease.seq > last.seq + 1  # renewed past the immediate takeover
    return last, new


def test_a_restarted_process_fences_its_own_previous_boot(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2))
        old = cluster.node(1)
        last, new = await _restart_renewed(cluster, 1)
        fence = await new.controller.fence_process_incarnation(
            old.participant, deadline=cluster.deadline()
        )
        _assert_takeover(fence, last, new)
        # Idempotent, and the record was not touched: the new boot keeps renewing.
        again = await new.controller.fence_process_incarnation(
            old.participant, deadline=cluster.deadline()
        )
        assert again == fence
        stored = await read_node_record(store, 1)
        assert stored is not None and stored.record.lease.owner == new.boot
        assert stored.record.state is NodeState.ACTIVE

    asyncio.run(main())


def test_a_node_restarted_twice_is_fenced_for_both_old_boots(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2))
        first = cluster.node(2)
        last1, second = await _restart_renewed(cluster, 2)
        last2, third = await _restart_renewed(cluster, 2)
        # Node 2's own newest process, and a restarted node 1 whose process never saw node 2's
        # older boots, both prove each takeover.
        _, leader = await _restart_renewed(cluster, 1)
        for controller in (third.controller, leader.controller):
            fence1 = await controller.fence_process_incarnation(
                first.participant, deadline=cluster.deadline()
            )
            _assert_takeover(fence1, last1, second)
            fence2 = await controller.fence_process_incarnation(
                second.participant, deadline=cluster.deadline()
            )
            _assert_takeover(fence2, last2, third)
        stored = await read_node_record(store, 2)
        assert stored is not None
        assert [f.predecessor.owner for f in stored.record.takeovers] == [second.boot, first.boot]

    asyncio.run(main())


def test_a_leader_takeover_is_recorded_and_survives_a_restart(store: ObjectStore) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2, 3))
        dead = cluster.node(3)
        cluster.stop(3)
        await cluster.advance(PROCESS_TTL_S + 1)
        taken = await cluster.controller(1).fence_process_incarnation(
            dead.participant, deadline=cluster.deadline()
        )
        assert process_fence_problem(taken) is None
        assert taken.predecessor == dead.holder.record.lease
        stored = await read_node_record(store, 3)
        assert stored is not None and stored.record.state is NodeState.LEFT
        assert stored.record.takeovers[0] == taken
        # Node 3 restarts and renews; a restarted leader, which never observed the dead boot,
        # still proves the leader's takeover of it.
        _, back = await _restart_renewed(cluster, 3)
        _, leader = await _restart_renewed(cluster, 1)
        fence = await leader.controller.fence_process_incarnation(
            dead.participant, deadline=cluster.deadline()
        )
        assert fence == taken
        stored = await read_node_record(store, 3)
        assert stored is not None
        assert stored.record.takeovers[1:] == (taken,)
        assert stored.record.takeovers[0].successor.owner == back.boot

    asyncio.run(main())


def test_past_the_recorded_takeovers_only_an_observed_immediate_takeover_counts(
    store: ObjectStore,
) -> None:
    async def main() -> None:
        cluster = await started(store, (1, 2))
        controller = cluster.controller(1)  # observed node 2's first boot at the start
        first = cluster.node(2)
        cluster.stop(1)  # no refresh: node 2's later boots do not push the first out of memory
        for _ in range(NODE_TAKEOVERS_MAX + 1):
            await _restart_renewed(cluster, 2)
        stored = await read_node_record(store, 2)
        assert stored is not None and len(stored.record.takeovers) == NODE_TAKEOVERS_MAX
        assert first.boot not in {f.predecessor.owner for f in stored.record.takeovers}
        with raises_because(Refused, Refusal.TAKEOVER_NOT_IMMEDIATE):
            await controller.fence_process_incarnation(
                first.participant, deadline=cluster.deadline()
            )
        # A restarted process observed nothing of it: refused as never observed.
        _, leader = await _restart_renewed(cluster, 1)
        with raises_because(Refused, Refusal.TAKEOVER_NEVER_OBSERVED):
            await leader.controller.fence_process_incarnation(
                first.participant, deadline=cluster.deadline()
            )
        stranger = FenceParticipant(node_id=2, boot_incarnation=leader.boot)
        with raises_because(Refused, Refusal.TAKEOVER_NEVER_OBSERVED):
            await controller.fence_process_incarnation(stranger, deadline=cluster.deadline())

    asyncio.run(main())
