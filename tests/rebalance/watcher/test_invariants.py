"""RB-18 (docs/protocols/rebalance.md): a transport/checkpoint fence is activated only for an
owner-complete committed map that every current participant has exactly adopted. Three
watched processes (`watcher_support`), real controllers, authority and snapshot store on
memory://, watchers ticked by hand."""

from __future__ import annotations

import uuid

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.cluster.slots import write_process_slot
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.store import ObjectStore
from tests.rebalance.cluster_support import adoption_report
from tests.rebalance.watcher_support import WatchedCluster, run

V1_OWNERS = (1, 2, 1, 2)
V2_OWNERS = (1, 2, 3, 2)  # node 3 joins with vnode 2


def test_rb18_fence_needs_exact_adoption_by_every_participant() -> None:
    """After the Commit of v2, nodes 1 and 2 run v2 and report it: neither installs the v2
    fence while node 3's slot is empty or holds another boot's report; node 3's exact report,
    even with its vnode state not ready, lets both install it."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await WatchedCluster.start(clock, store, (1, 2, 3), V1_OWNERS)
        await cluster.settle()
        drain = await cluster.publish_drain(V2_OWNERS)
        await cluster.settle()
        assert await cluster.finalize(drain, SourceDrainOutcome.COMMIT) == 2
        v2 = await cluster.cluster.snapshots.load()
        assert v2 is not None and not v2.draining
        fence = snapshot_fence(v2)
        running = (cluster.proc(1), cluster.proc(2))

        async def installed() -> list[bool]:
            """After a tick of nodes 1 and 2: whether each runs with the v2 fence installed."""
            await cluster.tick(1, 2)
            states = []
            for proc in running:
                assert proc.engine.registry().version == 2
                certified = proc.controller.certify_owner_map(2)
                states.append(certified == fence and not proc.engine.cluster_intake_fenced())
                assert certified in (None, fence)
            return states

        assert await installed() == [False, False]  # node 3 has not reported
        three = cluster.proc(3).node.participant
        other_boot = FenceParticipant(node_id=3, boot_incarnation=str(uuid.uuid4()))
        forged = adoption_report(fence, other_boot, ready=True)
        await write_process_slot(store, clock, forged, deadline=cluster.deadline())
        assert await installed() == [False, False]  # another boot's report does not count
        exact = adoption_report(fence, three, ready=False)
        await write_process_slot(store, clock, exact, deadline=cluster.deadline())
        assert await installed() == [True, True]  # readiness is not required

    run(body)
