"""A cluster with engines: `Cluster` (controllers) plus one `RecordingEngine` and one
`RebalanceContext` per node, for leader-side scenario tests (RB §7 RB-T25..RB-T47).

`install(node, snapshot)` does by hand what the watcher's publication does on every tick:
adopt, publish the vnode-state report, publish the local fence and activate authority.
`drive` runs a coroutine while simulated time moves; `follower_ack` is what a predecessor
follower's watcher does for a draining head.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import VnodeStateReady
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer, LeaderCheckpointer
from laminar_cluster.rebalance.rotation.graceful import prepare_and_announce_local_drain
from laminar_cluster.store import ObjectStore
from tests.rebalance.cluster_support import Cluster, adoption_report
from tests.rebalance.engine.recording import RecordingEngine

P = ParamSpec("P")
T = TypeVar("T")


def synchronous(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async test body under `asyncio.run` (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


CONFIG = RebalanceConfig(
    watcher_poll_s=0.2,
    rebalance_debounce_s=0.5,
    checkpoint_timeout_s=30.0,
    retry_delay_s=0.5,
    drain_ack_timeout_s=1.0,
)


@dataclass
class Scenario:
    cluster: Cluster
    vnode_count: int
    config: RebalanceConfig = CONFIG
    engines: dict[int, RecordingEngine] = field(default_factory=dict)

    @classmethod
    async def start(
        cls,
        store: ObjectStore,
        clock: SimulatedClock,
        node_ids: Sequence[int],
        *,
        vnode_count: int = 4,
        config: RebalanceConfig = CONFIG,
    ) -> Scenario:
        cluster = await Cluster.start(store, clock, tuple(node_ids))
        scenario = cls(cluster, vnode_count, config)
        for node_id in node_ids:
            scenario.add_engine(node_id)
        return scenario

    @property
    def clock(self) -> SimulatedClock:
        return self.cluster.clock

    def add_engine(
        self,
        node_id: int,
        *,
        checkpointer: Checkpointer | None = None,
        vnode_state_ready: VnodeStateReady | None = None,
    ) -> RecordingEngine:
        node = self.cluster.node(node_id)
        if checkpointer is None:
            decisions = node.authority.decisions
            assert decisions is not None
            checkpointer = LeaderCheckpointer(
                decisions,
                node.authority,
                node.controller.capture_leader_proof,
                lambda fence: self._owners_for(node_id, fence),
            )
        engine = RecordingEngine(
            clock=self.clock,
            participant=node.participant,
            checkpointer=checkpointer,
            vnode_state_ready=vnode_state_ready,
        )
        self.engines[node_id] = engine
        return engine

    def _owners_for(self, node_id: int, fence: CheckpointAssignmentFence) -> Sequence[int] | None:
        registry = self.engines[node_id].registry()
        if registry.version != fence.assignment_version:
            return None
        return registry.owners

    def ctx(self, node_id: int) -> RebalanceContext:
        return RebalanceContext(
            controller=self.cluster.controller(node_id),
            engine=self.engines[node_id],
            snapshots=self.cluster.snapshots,
            config=self.config,
            vnode_count=self.vnode_count,
        )

    async def install(self, node_id: int, snapshot: AssignmentSnapshot) -> None:
        """Adopt `snapshot`, report it ready, publish the fence and open authority."""
        engine = self.engines[node_id]
        controller = self.cluster.controller(node_id)
        deadline = self.cluster.deadline()
        await engine.adopt_assignment(snapshot, deadline=deadline)
        fence = snapshot_fence(snapshot)
        me = controller.local_participant()
        await controller.announce_adopted_assignment(
            adoption_report(fence, me, ready=fence.participant_incarnation(me.node_id) is not None),
            deadline=deadline,
        )
        if fence.participant_incarnation(me.node_id) == me.boot_incarnation:
            controller.publish_checkpoint_assignment_fence(fence)
            await engine.activate_authority(
                fence, None, engine.authority_revision(), deadline=deadline
            )

    async def bring_up(self, owners: Sequence[int], *, leader: int = 1) -> AssignmentSnapshot:
        """Elect `leader`, seed v1 with `owners`, and install v1 on every node."""
        await self.cluster.elect(leader)
        v1 = await self.cluster.seed(owners)
        for node_id in sorted(self.engines):
            await self.install(node_id, v1)
        return v1

    async def checkpoint(self, node_id: int) -> None:
        """One committed cluster checkpoint under `node_id`'s installed fence."""
        result = await self.engines[node_id].checkpoint_until(deadline=self.cluster.deadline())
        assert result.success, result.error


async def drive(scenario: Scenario, work: Awaitable[T], *, step_s: float = 0.05) -> T:
    """Run `work` while simulated time moves (leases renewed, views refreshed)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await scenario.cluster.advance(step_s, step_s=step_s)
    return task.result()


async def follower_ack(scenario: Scenario, node_id: int) -> None:
    """What a predecessor follower's watcher does for a draining head (RB §4.11 A)."""
    snapshots = scenario.cluster.snapshots
    while True:
        head = await snapshots.load()
        if head is not None and head.draining:
            break
        await scenario.clock.sleep(0.05)
    transition = head.drain_transition
    assert transition is not None
    ctx = scenario.ctx(node_id)
    ctx.controller.publish_checkpoint_drain_transition(transition)
    await prepare_and_announce_local_drain(
        ctx, head, transition, ctx.me, deadline=scenario.cluster.deadline()
    )
