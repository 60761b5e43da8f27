"""Processes for the recovery scenarios (RB §7 RB-T28, RB-T48..RB-T53, RB-T70, RB-T74).

Each node of a `tests.rebalance.cluster_support.Cluster` gets a `BaseEngine` with a
`LeaderCheckpointer` and a `RebalanceContext`. Time moves only through the cluster
(`SimulatedClock`). Helpers cover what the scenarios share: running v1 everywhere, a committed
cluster checkpoint, killing a node (graceful `left`, or silent death observed for a full
ttl), and restarting a node. A restarted node's controller is the real `StoreClusterController`:
it fences its own previous boot from the takeover its start recorded in the node's lease record
(`NodeLeaseRecord.takeovers`), without having observed that boot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.membership.records import NodeState
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.store import ObjectStore, open_store
from tests.rebalance.cluster_support import Cluster, ClusterNode

FAR_S = 60.0


def run(body: Callable[[SimulatedClock, ObjectStore], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(SimulatedClock(seed=7), open_store("memory://"))

    asyncio.run(main())


@dataclass
class Proc:
    """One process: its cluster node, engine and context."""

    node: ClusterNode
    engine: BaseEngine
    ctx: RebalanceContext

    @property
    def controller(self) -> StoreClusterController:
        return self.node.controller

    @property
    def me(self) -> FenceParticipant:
        return self.node.participant


class RecoveryCluster:
    def __init__(self, cluster: Cluster, vnode_count: int) -> None:
        self.cluster = cluster
        self.config = RebalanceConfig.test_preset()
        self.vnode_count = vnode_count
        self.procs: dict[int, Proc] = {}

    @classmethod
    async def start(
        cls,
        clock: SimulatedClock,
        store: ObjectStore,
        node_ids: Iterable[int],
        owners: Sequence[int],
        *,
        leader: int,
    ) -> RecoveryCluster:
        """Start the nodes, elect `leader`, seed v1 = `owners`, build every process and have
        each one run v1."""
        cluster = await Cluster.start(store, clock, node_ids)
        recovery = cls(cluster, len(owners))
        await cluster.elect(leader)
        v1 = await cluster.seed(owners)
        for node_id in sorted(cluster.nodes):
            proc = recovery.build(node_id)
            await proc.engine.adopt_assignment(v1, deadline=recovery.deadline())
        return recovery

    def build(self, node_id: int) -> Proc:
        node = self.cluster.node(node_id)
        engine = BaseEngine(clock=self.cluster.clock, participant=node.participant)
        authority = node.authority
        engine.checkpointer = LeaderCheckpointer(
            authority.require_decisions(),
            authority,
            node.controller.capture_leader_proof,
            owners_of=lambda fence: engine.registry().owners,
        )
        ctx = RebalanceContext(
            controller=node.controller,
            engine=engine,
            snapshots=self.cluster.snapshots,
            config=self.config,
            vnode_count=self.vnode_count,
        )
        proc = Proc(node, engine, ctx)
        self.procs[node_id] = proc
        return proc

    def proc(self, node_id: int) -> Proc:
        return self.procs[node_id]

    def deadline(self) -> float:
        return self.cluster.clock.monotonic() + FAR_S

    async def head(self) -> AssignmentSnapshot:
        head = await self.cluster.snapshots.load()
        assert head is not None
        return head

    async def checkpoint(
        self, leader: int, fence: CheckpointAssignmentFence | None = None
    ) -> RecoveryCapsuleRef:
        """A committed cluster checkpoint by `leader` under `fence` (default: the head's)."""
        proc = self.procs[leader]
        fence = fence or snapshot_fence(await self.head())
        checkpointer = proc.engine.checkpointer
        assert checkpointer is not None
        result = await checkpointer(fence, None, deadline=self.deadline())
        assert result.success, result.error
        outcome = await cluster_outcome(proc.node.authority, result.epoch)
        assert outcome is not None and outcome.recovery_capsule is not None
        return outcome.recovery_capsule

    async def leave(self, node_id: int) -> None:
        """`node_id` announces `left` and stops."""
        await self.cluster.node(node_id).holder.renew(
            deadline=self.deadline(), state=NodeState.LEFT
        )
        self.cluster.stop(node_id)
        await self.cluster.refresh()

    async def die(self, node_id: int) -> None:
        """`node_id` stops renewing; the others observe it unchanged for more than a ttl."""
        self.cluster.stop(node_id)
        await self.cluster.advance(self.cluster.process_ttl_s + 1.0)

    async def restart(self, node_id: int) -> Proc:
        """A new process of `node_id` takes over its lease (new boot, empty registry)."""
        old = self.cluster.node(node_id)
        old.leadership.set(None)
        await self.cluster.restart(node_id)
        await self.cluster.refresh()
        return self.build(node_id)
