"""Builders for the coordinated-recovery hook scenarios (RB §4.17, RB §4.18, RB-T65..RB-T72).

A `Scenario` is a `cluster_support.Cluster` plus one `RecordingEngine` and one
`RebalanceContext` per node. `install` stands in for the snapshot watcher's publication
(RB §4.12) without running it: adopt the committed snapshot, publish its fence and an exact ready
report, and activate the engine's authority. `drive` runs a coroutine while stepping the
simulated clock, for code that sleeps or waits on deadlines; `with_watchers` runs a coroutine
while every node's real snapshot watcher ticks and every running lease is renewed.
`commit_terminal` commits a drain from v1 as the leader; `drained` runs `wait_until_drained`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from laminar_cluster.assignment.model import next_draining, snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.node.selection import wait_until_drained
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.watcher.snapshot_watcher import SnapshotWatcher
from laminar_cluster.store import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    PutMode,
    PutResult,
    open_store,
)
from tests.rebalance.cluster_support import Cluster, adoption_report
from tests.rebalance.engine.recording import RecordingEngine

T = TypeVar("T")
CONFIG = RebalanceConfig.test_preset()


@dataclass
class Scenario:
    cluster: Cluster
    engines: dict[int, RecordingEngine]
    contexts: dict[int, RebalanceContext]
    v1: AssignmentSnapshot

    @property
    def clock(self) -> SimulatedClock:
        return self.cluster.clock

    @property
    def store(self) -> ObjectStore:
        return self.cluster.store

    def ctx(self, node_id: int) -> RebalanceContext:
        return self.contexts[node_id]

    def engine(self, node_id: int) -> RecordingEngine:
        return self.engines[node_id]

    def checkpointer(self, node_id: int) -> LeaderCheckpointer:
        node = self.cluster.node(node_id)
        decisions = node.authority.decisions
        assert decisions is not None
        engine = self.engines[node_id]
        return LeaderCheckpointer(
            decisions,
            node.authority,
            node.controller.capture_leader_proof,
            lambda fence: _owners_of(engine, fence),
        )

    async def checkpoint(self, fence: CheckpointAssignmentFence) -> RecoveryCapsuleRef:
        """A committed cluster checkpoint under `fence`, taken by the leader (node 1)."""
        result = await self.checkpointer(1)(fence, None, deadline=self.cluster.deadline())
        assert result.success, result.error
        outcome = await cluster_outcome(self.cluster.node(1).authority, result.epoch)
        assert outcome is not None and outcome.recovery_capsule is not None
        return outcome.recovery_capsule

    async def drain(self, owners: Sequence[int]) -> AssignmentSnapshot:
        """Save draining v2 from v1 to `owners` (participants: the owners' current boots),
        opened by the leader's proof."""
        proof = self.cluster.controller(1).capture_leader_proof()
        assert proof is not None
        draining = next_draining(
            self.v1,
            owners,
            self.cluster.participants(owners),
            proof,
            now_ms=self.clock.wall_ms(),
        )
        result = await self.cluster.snapshots.save_if_version(draining, 1)
        assert isinstance(result, Rotated), result
        return draining


def _owners_of(engine: BaseEngine, fence: CheckpointAssignmentFence) -> Sequence[int] | None:
    registry = engine.registry()
    return registry.owners if registry.version == fence.assignment_version else None


async def build(
    node_ids: Iterable[int],
    owners: Sequence[int],
    *,
    store: ObjectStore | None = None,
    installed: Iterable[int] | None = None,
    engine_type: type[RecordingEngine] = RecordingEngine,
) -> Scenario:
    """Nodes `node_ids` (node 1 leads) each with an `engine_type` engine, v1 = `owners`, and
    v1 installed on `installed` (default: every node)."""
    node_ids = tuple(node_ids)
    clock = SimulatedClock()
    cluster = await Cluster.start(store or open_store("memory://"), clock, node_ids)
    await cluster.elect(1)
    v1 = await cluster.seed(owners)
    scenario = Scenario(cluster, {}, {}, v1)
    for node_id in node_ids:
        node = cluster.node(node_id)
        engine = engine_type(clock=clock, participant=node.participant)
        scenario.engines[node_id] = engine
        scenario.contexts[node_id] = RebalanceContext(
            controller=node.controller,
            engine=engine,
            snapshots=cluster.snapshots,
            config=CONFIG,
            vnode_count=len(owners),
        )
        engine.checkpointer = scenario.checkpointer(node_id)
    for node_id in node_ids if installed is None else installed:
        await install(scenario.ctx(node_id), v1)
    return scenario


async def install(ctx: RebalanceContext, snapshot: AssignmentSnapshot) -> None:
    """What one watcher publication leaves behind for committed `snapshot` (RB §4.12)."""
    deadline = ctx.head_deadline()
    await ctx.engine.adopt_assignment(snapshot, deadline=deadline)
    fence = snapshot_fence(snapshot)
    me = ctx.me
    if me in snapshot.participants:
        await ctx.controller.announce_adopted_assignment(
            adoption_report(fence, me, ready=True), deadline=deadline
        )
    ctx.controller.publish_checkpoint_assignment_fence(fence)
    activation = await ctx.engine.activate_authority(
        fence, None, ctx.engine.authority_revision(), deadline=deadline
    )
    assert activation.installed


async def drive(
    clock: SimulatedClock, work: Awaitable[T], *, step_s: float = 0.02, real_pause_s: float = 0.001
) -> T:
    """Run `work` while stepping `clock` until it finishes; its exception is re-raised as is.

    Store requests complete on another thread (obstore), so each step also pauses a little real
    time: simulated time must not race ahead of a request that is still in flight."""
    failure: list[Exception] = []

    async def wrapped() -> T | None:
        try:
            return await work
        except Exception as error:  # re-raised below, outside the task group
            failure.append(error)
            return None

    async with asyncio.TaskGroup() as group:
        task = group.create_task(wrapped())
        while not task.done():
            await asyncio.sleep(real_pause_s)
            await clock.step(step_s)
    if failure:
        raise failure[0]
    return cast(T, task.result())


async def with_watchers(scenario: Scenario, work: Awaitable[T], *, renew_s: float = 0.25) -> T:
    """Run `work` (under `drive`) while every node runs its `SnapshotWatcher` and every
    running node's process lease is renewed and its membership view refreshed each `renew_s`."""
    stop = asyncio.Event()
    cluster = scenario.cluster

    async def renew() -> None:
        while not stop.is_set():
            await scenario.clock.sleep(renew_s)
            await cluster.renew()
            await cluster.refresh()

    async def body() -> T:
        async with asyncio.TaskGroup() as group:
            for node_id in sorted(scenario.contexts):
                group.create_task(SnapshotWatcher(scenario.ctx(node_id)).run(stop))
            group.create_task(renew())
            try:
                return await work
            finally:
                stop.set()

    return await drive(scenario.clock, body())


async def listing(store: ObjectStore) -> list[tuple[str, str | None, int]]:
    """Every object as (key, e_tag, size): equal before and after means nothing was written."""
    return [(meta.key, meta.e_tag, meta.size) for meta in await store.list("")]


class PassThroughStore(ObjectStore):
    """Forwards every request to `inner` once `before(op)` returns: a subclass stalls or fails
    the requests it is about."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    async def before(self, op: str) -> None:
        """Called before each request (`get`, `head`, `put`, `list`, `delete`)."""

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        await self.before("get")
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        await self.before("head")
        return await self.inner.head(key)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        await self.before("put")
        return await self.inner.put(key, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        await self.before("list")
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def delete(self, key: str) -> None:
        await self.before("delete")
        await self.inner.delete(key)


class StalledListStore(PassThroughStore):
    """A store whose LIST never answers."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.never = asyncio.Event()

    async def before(self, op: str) -> None:
        if op == "list":
            await self.never.wait()


async def commit_terminal(
    scenario: Scenario, owners: tuple[int, ...] = (1, 1, 2, 2)
) -> AssignmentSnapshot:
    """A live Commit of the drain v1 -> `owners`, finalized by the leader."""
    draining = await scenario.drain(owners)
    handoff = await scenario.checkpoint(snapshot_fence(scenario.v1))
    version = await finalize_drain_snapshot(
        scenario.ctx(1),
        draining,
        scenario.v1,
        SourceDrainOutcome.COMMIT,
        handoff,
        FinalizeMode.LIVE,
    )
    assert version == 2
    terminal = await scenario.cluster.snapshots.load()
    assert terminal is not None and not terminal.draining
    return terminal


async def drained(
    scenario: Scenario,
    me: int,
    *,
    authority: bool,
    vnode_count: int = 4,
    snapshots: AssignmentSnapshotStore | None = None,
    wait_s: float = 1.0,
) -> bool:
    """`wait_until_drained` for node `me` within `wait_s` (with node 1's authority, or none)."""
    clock = scenario.clock
    return await drive(
        clock,
        wait_until_drained(
            snapshots or scenario.cluster.snapshots,
            scenario.cluster.node(1).authority if authority else None,
            me,
            vnode_count,
            CONFIG.watcher_poll_s,
            clock.monotonic() + wait_s,
            clock,
        ),
    )
