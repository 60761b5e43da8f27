"""A cluster of watched processes for the watcher scenarios (RB §7 RB-T54..RB-T64).

Each node of a `tests.rebalance.cluster_support.Cluster` gets a `RecordingEngine` (with a
`LeaderCheckpointer`, so the leader can take real handoff checkpoints), a `RebalanceContext`
and a `SnapshotWatcher`. Tests drive the watchers tick by tick (`tick`, `settle`) on a
`SimulatedClock` that does not move unless a test moves it, and play the leader's side of a
rotation with the real leader procedures (`publish_drain`, `finalize`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from laminar_cluster.assignment.model import next_draining, snapshot_fence
from laminar_cluster.assignment.placement import PlacementMetrics
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import Rotated
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome
from laminar_cluster.authority.recovery_faults import recovery_fault_inventory
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.membership.records import NodeState
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.cluster.slots import read_adopted_assignments, read_drain_acks
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import AdoptHook
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption, DrainAck
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.rotation.graceful import pre_rotation_checkpoint
from laminar_cluster.rebalance.watcher.publish import PlacementSink
from laminar_cluster.rebalance.watcher.snapshot_watcher import SnapshotWatcher
from laminar_cluster.store import ObjectStore, open_store
from tests.rebalance.cluster_support import Cluster, ClusterNode
from tests.rebalance.engine.recording import RecordingEngine

FAR_S = 60.0


def run(body: Callable[[SimulatedClock, ObjectStore], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(SimulatedClock(seed=11), open_store("memory://"))

    asyncio.run(main())


@dataclass
class RecordingSink:
    """A `PlacementSink` that keeps every publication."""

    published: list[PlacementMetrics] = field(default_factory=list)

    def publish_placement(self, metrics: PlacementMetrics) -> None:
        self.published.append(metrics)


@dataclass
class Proc:
    """One watched process."""

    node: ClusterNode
    engine: RecordingEngine
    ctx: RebalanceContext
    watcher: SnapshotWatcher

    @property
    def controller(self) -> StoreClusterController:
        return self.node.controller


class WatchedCluster:
    def __init__(self, cluster: Cluster, config: RebalanceConfig, vnode_count: int) -> None:
        self.cluster = cluster
        self.config = config
        self.vnode_count = vnode_count
        self.procs: dict[int, Proc] = {}
        self.v1: AssignmentSnapshot | None = None

    @classmethod
    async def start(
        cls,
        clock: SimulatedClock,
        store: ObjectStore,
        node_ids: Iterable[int],
        owners: Sequence[int],
        *,
        leader: int = 1,
        adopt_hooks: dict[int, AdoptHook] | None = None,
        sink: PlacementSink | None = None,
    ) -> WatchedCluster:
        """Start the nodes, elect `leader`, seed v1 = `owners`, and build every process."""
        cluster = await Cluster.start(store, clock, node_ids)
        watched = cls(cluster, RebalanceConfig.test_preset(), len(owners))
        await cluster.elect(leader)
        watched.v1 = await cluster.seed(owners)
        for node_id in sorted(cluster.nodes):
            watched.build(node_id, (adopt_hooks or {}).get(node_id), sink)
        return watched

    def build(
        self, node_id: int, adopt_hook: AdoptHook | None = None, sink: PlacementSink | None = None
    ) -> Proc:
        node = self.cluster.node(node_id)
        engine = RecordingEngine(
            clock=self.cluster.clock, participant=node.participant, adopt_hook=adopt_hook
        )
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
        proc = Proc(node, engine, ctx, SnapshotWatcher(ctx, sink))
        self.procs[node_id] = proc
        return proc

    def proc(self, node_id: int) -> Proc:
        return self.procs[node_id]

    def deadline(self) -> float:
        return self.cluster.clock.monotonic() + FAR_S

    async def tick(self, *node_ids: int) -> None:
        """One watcher tick on each node, in the order given (all nodes by default)."""
        for node_id in node_ids or tuple(sorted(self.procs)):
            await self.procs[node_id].watcher.tick()

    async def settle(self, rounds: int = 2) -> None:
        """`rounds` ticks of every watcher: enough for every report to land and every fence to
        be activated."""
        for _ in range(rounds):
            await self.tick()

    async def publish_drain(
        self, owners: Sequence[int], *, leader: int = 1, current: AssignmentSnapshot | None = None
    ) -> AssignmentSnapshot:
        """The leader's RB §4.4 steps 1-4 without the preflight: CAS the draining successor of
        `current` (default: the head) and install its transition in the leader's controller."""
        proc = self.procs[leader]
        current = current or await self.cluster.snapshots.load()
        assert current is not None
        proof = proc.controller.capture_leader_proof()
        assert proof is not None
        drain = next_draining(
            current,
            owners,
            self.cluster.participants(owners),
            proof,
            now_ms=self.cluster.clock.wall_ms(),
        )
        result = await self.cluster.snapshots.save_if_version(drain, current.assignment_version)
        assert isinstance(result, Rotated), result
        proc.controller.publish_checkpoint_drain_transition(drain.drain_transition)
        return drain

    async def finalize(
        self,
        drain: AssignmentSnapshot,
        outcome: SourceDrainOutcome,
        *,
        leader: int = 1,
    ) -> int:
        """The leader's RB §4.4 steps 6.6-6.8: handoff checkpoint (Commit) and finalization."""
        proc = self.procs[leader]
        transition = drain.drain_transition
        assert transition is not None
        predecessor = await self.cluster.snapshots.load_version(drain.assignment_version - 1)
        assert predecessor is not None
        handoff = None
        if outcome is SourceDrainOutcome.COMMIT:
            handoff = await pre_rotation_checkpoint(proc.ctx, transition)
        return await finalize_drain_snapshot(
            proc.ctx, drain, predecessor, outcome, handoff, FinalizeMode.LIVE
        )

    async def checkpoint(self, leader: int = 1) -> RecoveryCapsuleRef:
        """A committed cluster checkpoint by `leader` under the head's fence."""
        proc = self.procs[leader]
        head = await self.cluster.snapshots.load()
        assert head is not None
        checkpointer = proc.engine.checkpointer
        assert checkpointer is not None
        result = await checkpointer(snapshot_fence(head), None, deadline=self.deadline())
        assert result.success, result.error
        outcome = await cluster_outcome(proc.node.authority, result.epoch)
        assert outcome is not None and outcome.recovery_capsule is not None
        return outcome.recovery_capsule

    async def leave(self, node_id: int) -> None:
        """`node_id` announces `left` and stops; every other node notes it unresponsive."""
        await self.cluster.node(node_id).holder.renew(
            deadline=self.deadline(), state=NodeState.LEFT
        )
        self.cluster.stop(node_id)
        await self.cluster.refresh()
        for other, proc in self.procs.items():
            if other != node_id:
                proc.controller.note_unresponsive(node_id)

    async def faulted_nodes(self, leader: int = 1) -> set[int]:
        inventory = await recovery_fault_inventory(self.procs[leader].node.authority)
        return {fault.reporter for fault in inventory.faults}

    async def acks(self) -> tuple[DrainAck, ...]:
        c = self.cluster
        return await read_drain_acks(c.store, c.clock, deadline=self.deadline())

    async def reports(self) -> dict[int, CheckpointAssignmentAdoption]:
        c = self.cluster
        found = await read_adopted_assignments(c.store, c.clock, deadline=self.deadline())
        return {report.participant.node_id: report for report in found}


def fence_of(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence:
    return snapshot_fence(snapshot)
