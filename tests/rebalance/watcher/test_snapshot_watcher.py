"""The snapshot watcher, follower side (RB §4.11-§4.14, RB §7 RB-T54..RB-T64).

Three nodes unless noted: v1 = [1, 2, 1, 2] (participants 1 and 2), node 1 leads, node 3 is a
live member that owns nothing until a rotation gives it vnodes. Watchers are ticked by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from laminar_cluster.assignment.digest import drain_id, owner_map_digest
from laminar_cluster.assignment.model import next_for_participants
from laminar_cluster.assignment.paths import finalization_path, snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.codec import digest32, encode
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.cluster.slots import write_process_slot
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import ShuffleState
from laminar_cluster.rebalance.interfaces import INITIAL_STATE, SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.rebalance.watcher.snapshot_watcher import SnapshotWatcher
from laminar_cluster.store import OVERWRITE, ObjectStore
from tests.rebalance.watcher_support import Proc, RecordingSink, WatchedCluster, fence_of, run

V1_OWNERS = (1, 2, 1, 2)
V2_OWNERS = (1, 2, 3, 2)
COMMIT, ABORT = SourceDrainOutcome.COMMIT, SourceDrainOutcome.ABORT


async def started(clock: SimulatedClock, store: ObjectStore) -> WatchedCluster:
    cluster = await WatchedCluster.start(clock, store, (1, 2, 3), V1_OWNERS)
    await cluster.settle()
    return cluster


def test_rb_t54_follower_acks_drain() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        assert cluster.v1 is not None
        assert follower.engine.installed_fence() == fence_of(cluster.v1)
        drain = await cluster.publish_drain(V2_OWNERS)
        transition = drain.drain_transition
        await cluster.tick(2)
        assert follower.controller.checkpoint_drain_transition() == transition
        assert follower.engine.call_count("prepare_local_source_drain") == 1
        assert follower.watcher.last_drained == 2
        assert follower.watcher.active_local_drain == transition
        acks = await cluster.acks()
        assert [(a.participant, a.transition) for a in acks] == [
            (follower.node.participant, transition)
        ]
        await cluster.tick(2)
        assert follower.engine.call_count("prepare_local_source_drain") == 1
        assert follower.engine.installed_fence() == fence_of(cluster.v1)
        assert follower.engine.installed_drain_transition() == transition
        assert follower.controller.certify_owner_map(1) == fence_of(cluster.v1)
        assert not follower.engine.cluster_intake_fenced()
        # The target-only joiner notes the drain and never prepares.
        await cluster.tick(3)
        assert cluster.proc(3).watcher.last_drained == 2
        assert cluster.proc(3).engine.call_count("prepare_local_source_drain") == 0

    run(body)


def test_rb_t55_follower_adopts_commit_terminal() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        drain = await cluster.publish_drain(V2_OWNERS)
        transition = drain.drain_transition
        assert transition is not None
        await cluster.settle()  # every predecessor acks; the fences carry the transition
        assert cluster.proc(1).engine.installed_drain_transition() == transition
        assert await cluster.finalize(drain, COMMIT) == 2
        await cluster.tick(2)
        assert follower.engine.registry().version == 2
        assert follower.engine.registry().owners == V2_OWNERS
        assert follower.engine.owned_source_drain_resolved(drain_id(transition), COMMIT)
        assert follower.watcher.active_local_drain is None
        assert follower.watcher.terminal_resolution_hold is None
        assert follower.controller.checkpoint_drain_transition() is None
        await cluster.tick(3, 1, 2)
        terminal = await cluster.cluster.snapshots.load()
        assert terminal is not None and not terminal.draining
        assert follower.engine.installed_fence() == fence_of(terminal)
        assert follower.engine.installed_drain_transition() is None
        assert follower.watcher.installed_fence is not None
        assert follower.watcher.installed_fence[0] == 2
        assert not follower.watcher.dirty
        # Later ticks do not resolve again.
        await cluster.tick(2)
        assert follower.engine.call_count("resolve_local_source_drain") == 1

    run(body)


def assert_suspended(proc: Proc, version: int = 1) -> None:
    """Fail closed: intake fenced, no published fence or transition, shuffle not active."""
    assert proc.engine.cluster_intake_fenced()
    assert proc.controller.certify_owner_map(version) is None
    assert proc.controller.checkpoint_drain_transition() is None
    assert proc.engine.shuffle_state() is not ShuffleState.ACTIVE
    assert proc.watcher.dirty


async def acks_of(cluster: WatchedCluster, node_id: int) -> list[object]:
    return [ack.transition for ack in await cluster.acks() if ack.participant.node_id == node_id]


def test_rb_t56_stale_leader_drain_rejected(caplog: pytest.LogCaptureFixture) -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        await cluster.publish_drain(V2_OWNERS)
        await cluster.cluster.elect(3)  # a new term: the drain's leader proof is superseded
        with caplog.at_level(logging.WARNING):
            await cluster.tick(2)
        follower = cluster.proc(2)
        assert_suspended(follower)
        assert follower.engine.call_count("prepare_local_source_drain") == 0
        assert await acks_of(cluster, 2) == []
        assert follower.watcher.last_drained == 0
        assert "leader term was superseded" in caplog.text

    run(body)


def test_rb_t57_drain_not_exact_successor(caplog: pytest.LogCaptureFixture) -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        drain = await cluster.publish_drain(V2_OWNERS)
        await cluster.tick(1, 1)  # only the leader acks and activates the transition
        assert await cluster.finalize(drain, COMMIT) == 2
        await cluster.publish_drain((1, 3, 3, 2))  # draining v3 while node 2 runs v1
        with caplog.at_level(logging.WARNING):
            await cluster.tick(2)
        follower = cluster.proc(2)
        assert follower.engine.registry().version == 1
        assert_suspended(follower)
        assert follower.engine.call_count("prepare_local_source_drain") == 0
        assert await acks_of(cluster, 2) == []
        assert "not the exact successor" in caplog.text

    run(body)


def test_rb_t58_transient_corrupt_head_recovers() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        assert cluster.v1 is not None
        v1_fence = fence_of(cluster.v1)
        follower = cluster.proc(2)
        assert follower.engine.shuffle_state() is ShuffleState.ACTIVE
        await store.put(snapshot_path(2), b"{not an assignment", OVERWRITE)
        await cluster.tick(2)
        assert_suspended(follower)
        assert follower.engine.shuffle_state() is ShuffleState.SUSPENDED
        assert follower.watcher.durable_snapshot is None
        await cluster.tick(2)  # still corrupt: stays closed
        assert_suspended(follower)
        await store.delete(snapshot_path(2))
        await cluster.tick(2)
        assert follower.engine.shuffle_state() is ShuffleState.ACTIVE
        assert follower.engine.installed_fence() == v1_fence  # the same v1 certificate
        assert follower.controller.certify_owner_map(1) == v1_fence
        assert not follower.engine.cluster_intake_fenced()
        assert not follower.watcher.dirty
        assert follower.engine.registry().version == 1

    run(body)


def test_rb_t59_watcher_repairs_stale_report() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        exact = (await cluster.reports())[2]
        stale = msgspec.structs.replace(
            exact,
            assignment_version=7,
            assignment_digest=digest32(owner_map_digest(4, (2, 2, 2, 2))),
        )
        await write_process_slot(store, clock, stale, deadline=cluster.deadline())
        assert (await cluster.reports())[2] == stale
        await cluster.tick(2)
        assert (await cluster.reports())[2] == exact
        assert exact.vnode_state_ready
        await cluster.tick(2)
        assert follower.controller.certify_owner_map(1) is not None
        assert not follower.engine.cluster_intake_fenced()

    run(body)


def test_rb_t60_bare_successor_rejected(caplog: pytest.LogCaptureFixture) -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        assert cluster.v1 is not None
        bare = next_for_participants(
            cluster.v1, V2_OWNERS, cluster.cluster.participants(V2_OWNERS), now_ms=clock.wall_ms()
        )
        assert isinstance(await cluster.cluster.snapshots.save_if_version(bare, 1), Rotated)
        with caplog.at_level(logging.WARNING):
            await cluster.tick(2, 3)
        for node_id in (2, 3):
            proc = cluster.proc(node_id)
            assert proc.engine.registry().version == 1
            assert proc.engine.call_count("adopt_assignment") == 1  # only v1, at warm-up
            assert_suspended(proc)
        assert "no drain transition or recovery authority decision" in caplog.text

    run(body)


async def two_commits(cluster: WatchedCluster) -> None:
    """v2 and v3 committed by the leader (node 1), every watcher following v2."""
    drain = await cluster.publish_drain(V2_OWNERS)
    await cluster.settle()
    assert await cluster.finalize(drain, COMMIT) == 2
    await cluster.settle()
    drain = await cluster.publish_drain((1, 3, 3, 2))
    await cluster.settle()
    assert await cluster.finalize(drain, COMMIT) == 3


async def lose_v2(store: ObjectStore, cluster: WatchedCluster) -> None:
    await store.delete(snapshot_path(2))
    await store.delete(finalization_path(2))


async def corrupt_v2(store: ObjectStore, cluster: WatchedCluster) -> None:
    await store.put(snapshot_path(2), b"[]", OVERWRITE)


async def rebooted_v2(store: ObjectStore, cluster: WatchedCluster) -> None:
    """v2 replaced by a committed v2 with the same owners that certifies another boot of 2."""
    v2 = await cluster.cluster.snapshots.load_version(2)
    assert v2 is not None
    other = FenceParticipant(node_id=2, boot_incarnation="00000000-0000-0000-0000-000000000016")
    forged = msgspec.structs.replace(
        v2,
        participants=tuple(other if p.node_id == 2 else p for p in v2.participants),
    )
    await store.delete(finalization_path(2))
    await store.put(snapshot_path(2), encode(forged), OVERWRITE)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lose_v2, "lost predecessor"),
        (corrupt_v2, "assignment-snapshots"),
        (rebooted_v2, "does not bind its exact committed predecessor"),
    ],
)
def test_rb_t61_materialized_drain_predecessor_checks(
    mutate: object, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        await two_commits(cluster)
        assert callable(mutate)
        await mutate(store, cluster)
        with caplog.at_level(logging.WARNING):
            await cluster.tick(2)
        follower = cluster.proc(2)
        assert follower.engine.registry().version == 2
        assert_suspended(follower, 2)
        assert message in caplog.text

    run(body)


def test_rb_t62_recovery_head_ownerless_follows() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await WatchedCluster.start(clock, store, (1, 2), V1_OWNERS)
        await cluster.cluster.add(3, active=False)  # joining: never assignable
        await cluster.cluster.refresh()
        cluster.build(3)
        await cluster.settle()
        observer = cluster.proc(3)
        assert observer.engine.registry().version == 1
        await cluster.checkpoint()
        await cluster.leave(2)
        leader = cluster.proc(1)
        assert await try_rebalance(leader.ctx, leader.controller.assignable_instances()) == 2
        v2 = await cluster.cluster.snapshots.load()
        assert v2 is not None and v2.owners == (1, 1, 1, 1)
        await cluster.tick(3)
        assert observer.engine.registry().version == 2
        assert observer.engine.call_count("adopt_recovery_assignment") == 1
        assert observer.engine.recovery_checkpoint() is None
        assert observer.engine.call_count("fault_for_recovery_assignment") == 0
        assert not observer.controller.is_recovering()
        assert await cluster.faulted_nodes() == {1}  # only the leader, a participant
        assert observer.watcher.durable_snapshot == v2
        reports = await cluster.reports()
        assert reports[3].assignment_version == 2 and not reports[3].vnode_state_ready

    run(body)


def test_rb_t63_recovery_head_participant_faults() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        joiner = cluster.proc(3)
        assert joiner.engine.registry().version == 1
        cut = await cluster.checkpoint()
        await cluster.leave(2)
        leader = cluster.proc(1)
        assert await try_rebalance(leader.ctx, leader.controller.assignable_instances()) == 2
        v2 = await cluster.cluster.snapshots.load()
        assert v2 is not None and v2.owners == (3, 3, 1, 3)
        assert await cluster.faulted_nodes() == {1}
        await cluster.tick(3)
        assert await cluster.faulted_nodes() == {1, 3}  # a durable fault from node 3
        assert joiner.engine.call_count("fault_for_recovery_assignment") == 1  # cold bootstrap
        assert joiner.engine.call_count("adopt_recovery_assignment") == 1
        assert joiner.engine.call_count("adopt_assignment") == 1  # only v1
        assert joiner.engine.registry().version == 2
        assert joiner.engine.recovery_checkpoint() == cut
        # Restored cold from the audited checkpoint: our coordinated-recovery Release.
        assert not joiner.controller.is_recovering()
        assert joiner.watcher.durable_snapshot == v2
        assert joiner.watcher.dirty
        # Once every participant reported v2 the follower activates the v2 fence.
        await cluster.tick(1, 3)
        assert joiner.engine.installed_fence() == fence_of(v2)
        assert not joiner.engine.cluster_intake_fenced()

    run(body)


def test_rb_t64_shuffle_not_ready_keeps_predecessor() -> None:
    not_ready = {"left": 1}

    def hook(snapshot: AssignmentSnapshot) -> None:
        if snapshot.assignment_version == 2 and not_ready["left"] > 0:
            not_ready["left"] -= 1
            raise Refused(
                "the local graph still consumes the v1 transition",
                reason=Refusal.SHUFFLE_NOT_READY,
            )

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await WatchedCluster.start(
            clock, store, (1, 2, 3), V1_OWNERS, adopt_hooks={3: hook}
        )
        await cluster.settle()
        assert cluster.v1 is not None
        v1_fence = fence_of(cluster.v1)
        joiner = cluster.proc(3)
        assert joiner.engine.installed_fence() == v1_fence
        drain = await cluster.publish_drain(V2_OWNERS)
        await cluster.settle()
        assert await cluster.finalize(drain, COMMIT) == 2
        await cluster.tick(3)
        assert not_ready["left"] == 0
        assert joiner.engine.registry().version == 1
        assert joiner.engine.installed_fence() == v1_fence  # the predecessor stays active
        assert joiner.watcher.durable_snapshot == cluster.v1
        assert not joiner.engine.cluster_intake_fenced()
        await cluster.tick(3)  # retried: adopted now
        assert joiner.engine.registry().version == 2
        assert joiner.engine.registry().owners == V2_OWNERS

    run(body)


# -- beyond the numbered scenarios ---------------------------------------------------------------


def test_follower_resolves_abort_terminal() -> None:
    """RB §4.13: an Abort terminal (rollback at v2) resumes the follower's drained sources."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        drain = await cluster.publish_drain(V2_OWNERS)
        transition = drain.drain_transition
        assert transition is not None
        await cluster.settle()
        assert await cluster.finalize(drain, ABORT) == 2
        await cluster.tick(2)
        assert follower.engine.registry().version == 2
        assert follower.engine.registry().owners == V1_OWNERS
        assert follower.engine.owned_source_drain_resolved(drain_id(transition), ABORT)
        assert follower.watcher.active_local_drain is None
        await cluster.settle()
        rollback = await cluster.cluster.snapshots.load()
        assert rollback is not None
        assert follower.engine.installed_fence() == fence_of(rollback)

    run(body)


def test_stopped_recovery_defers_terminal_resolution() -> None:
    """RB §4.13 step 3: sources stopped by coordinated recovery are not resolved by the watcher."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        drain = await cluster.publish_drain(V2_OWNERS)
        await cluster.settle()
        follower.engine.enter_stopped_recovery()
        assert await cluster.finalize(drain, ABORT) == 2
        await cluster.tick(2)
        assert follower.watcher.active_local_drain is None
        assert follower.watcher.terminal_resolution_hold is None
        assert follower.engine.call_count("resolve_local_source_drain") == 0

    run(body)


def test_rb12_publication_closes_when_authority_revision_moved() -> None:
    """RB §4.12 step 2 (RB-12): another path closed authority after the head was read."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)
        stale = follower.engine.authority_revision()
        follower.engine.suspend_shuffle_fence()  # bumps the revision
        await follower.watcher.publish_authority(stale)
        assert_suspended(follower)
        await cluster.tick(2)  # the next tick re-reads and resumes
        assert follower.engine.shuffle_state() is ShuffleState.ACTIVE
        assert not follower.watcher.dirty

    run(body)


class _LeaderRecoversFirst(AssignmentSnapshotStore):
    """The head as the leader's own watcher reads it while the leader's rebalance attempt runs:
    the first load lets `before` (the leader's recovery) finish first, so the tick began with
    the predecessor as its local version and sees the recovery head the leader just adopted."""

    def __init__(self, store: ObjectStore, before: Callable[[], Awaitable[None]]) -> None:
        super().__init__(store)
        self._before: Callable[[], Awaitable[None]] | None = before

    async def load(self) -> AssignmentSnapshot | None:
        before, self._before = self._before, None
        if before is not None:
            await before()
        return await super().load()


def test_leader_watcher_racing_its_own_recovery_leaves_recovery_mode() -> None:
    """The leader materializes and adopts a recovery generation (and leaves recovery mode)
    while its own watcher's tick, begun on the predecessor, prepares the same generation: the
    preparation marks the process recovering again, and with the generation already adopted the
    tick must release it too. A leader left recovering defers every graceful rotation for good
    (`reconcile_drain_publication`), so a node that SIGTERMs after a failover never leaves
    (found by the stream process test and the demo: "leave timed out", no error logged)."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        await cluster.checkpoint()
        await cluster.leave(2)
        leader = cluster.proc(1)
        settled: list[int | None] = []

        async def recover() -> None:
            live = leader.controller.assignable_instances()
            settled.append(await try_rebalance(leader.ctx, live))
            assert not leader.controller.is_recovering()  # released after its own adoption

        snapshots = _LeaderRecoversFirst(cluster.cluster.store, recover)
        leader.watcher.ctx = dataclasses.replace(leader.ctx, snapshots=snapshots)
        await cluster.tick(1)
        assert settled == [2]
        assert leader.engine.registry().version == 2
        assert leader.engine.call_count("adopt_recovery_assignment") == 1
        assert leader.engine.call_count("fault_for_recovery_assignment") == 1  # not again
        assert not leader.controller.is_recovering()
        await cluster.tick(1, 3, 1)
        assert leader.engine.installed_fence() == fence_of(await cluster.cluster.snapshots.load())
        assert not leader.controller.is_recovering()

    run(body)


def test_placement_metrics_published_per_registry_version() -> None:
    """RB §3.4: published on the first tick and whenever the registry version changes."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        sink = RecordingSink()
        cluster = await WatchedCluster.start(clock, store, (1, 2, 3), V1_OWNERS, sink=sink)
        await cluster.tick(2)
        assert len(sink.published) == 1
        assert sink.published[0].vnodes_per_domain == {"unknown": 4}
        assert sink.published[0].blast_radius_ratio == 1.0
        await cluster.tick(2)
        assert len(sink.published) == 1  # same version: not again
        assert cluster.proc(2).watcher.metrics_version == 1

    run(body)


class _RecordingWatcher(SnapshotWatcher):
    """Records when each tick starts; a tick lasts `tick_s` of simulated time."""

    def __init__(self, ctx: RebalanceContext, tick_s: float) -> None:
        super().__init__(ctx)
        self.started_at: list[float] = []
        self.tick_s = tick_s

    async def tick(self) -> None:
        self.started_at.append(self.ctx.clock.monotonic())
        await self.ctx.clock.sleep(self.tick_s)


def test_run_ticks_immediately_skips_missed_ticks_and_yields_to_shutdown() -> None:
    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await WatchedCluster.start(clock, store, (1,), (1, 1))
        poll = cluster.config.watcher_poll_s
        watcher = _RecordingWatcher(cluster.proc(1).ctx, tick_s=2.5 * poll)
        start = clock.monotonic()
        shutdown = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(watcher.run(shutdown))
            await clock.step(0)
            assert watcher.started_at == [start]  # the first tick is immediate
            await clock.step(3.5 * poll)
            # The first tick overran 2.5 polls: ticks 1 and 2 are skipped, not burst.
            assert watcher.started_at == [start, start + 3 * poll]
            await clock.step(0.5 * poll)  # mid-tick: shutdown abandons it
            shutdown.set()
            await clock.step(0)
        assert len(watcher.started_at) == 2

    run(body)


class _GatedHeadLoads(AssignmentSnapshotStore):
    """Head loads wait for `release` once `armed`: a watcher tick held in flight."""

    def __init__(self, store: ObjectStore) -> None:
        super().__init__(store)
        self.armed = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def load(self) -> AssignmentSnapshot | None:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.release.wait()
        return await super().load()


def test_leader_tick_in_flight_across_its_own_recovery_releases() -> None:
    """Seed 502: the leader's watcher tick read local v1, then the leader's own recovery
    materialized and adopted v2 (restored cold, released); the tick, which then loaded v2, must
    not fault the leader again. Before the fix it left the leader recovering for good, so
    every later graceful rotation deferred and a restarted owner was never added back."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        await cluster.checkpoint()
        await cluster.leave(2)
        leader = cluster.proc(1)
        gated = _GatedHeadLoads(store)
        watcher = SnapshotWatcher(dataclasses.replace(leader.ctx, snapshots=gated))
        gated.armed = True
        async with asyncio.TaskGroup() as group:
            tick = group.create_task(watcher.tick())
            await gated.entered.wait()
            assert await try_rebalance(leader.ctx, leader.controller.assignable_instances()) == 2
            assert not leader.controller.is_recovering()
            faults = leader.engine.call_count("fault_for_recovery_assignment")
            gated.release.set()
            await tick
        v2 = await cluster.cluster.snapshots.load()
        assert v2 is not None and leader.engine.registry().version == 2
        assert not leader.controller.is_recovering()
        assert leader.engine.call_count("fault_for_recovery_assignment") == faults
        assert leader.engine.call_count("adopt_recovery_assignment") == 1
        assert watcher.durable_snapshot == v2

    run(body)


def test_rb14_recovery_head_participant_restores_the_initial_state() -> None:
    """LA-20, follower side: a participant of a recovery generation decided before any cluster
    checkpoint committed restores the initial state (its vnodes start empty)."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        joiner = cluster.proc(3)
        await cluster.leave(2)
        leader = cluster.proc(1)
        assert await try_rebalance(leader.ctx, leader.controller.assignable_instances()) == 2
        v2 = await cluster.cluster.snapshots.load()
        assert v2 is not None and 3 in v2.owners
        await cluster.tick(3)
        assert joiner.engine.registry().version == 2
        assert joiner.engine.call_count("adopt_recovery_assignment") == 1
        assert joiner.engine.recovery_checkpoint() is INITIAL_STATE
        assert not joiner.controller.is_recovering()
        await cluster.tick(1, 3)
        assert joiner.engine.installed_fence() == fence_of(v2)

    run(body)


async def drain_then_recovery_above_it(
    cluster: WatchedCluster, before_terminal: Callable[[AssignmentDrainTransition], Awaitable[None]]
) -> AssignmentDrainTransition:
    """Drain v1 -> V2_OWNERS; `before_terminal` runs while it is the draining head; the leader
    commits it (v2), then sheds the target owner 3 by recovery (v3). Node 2 has not ticked
    since `before_terminal`."""
    await cluster.checkpoint()
    drain = await cluster.publish_drain(V2_OWNERS)
    transition = drain.drain_transition
    assert transition is not None
    await before_terminal(transition)
    assert await cluster.finalize(drain, COMMIT) == 2
    await cluster.tick(1)
    await cluster.leave(3)  # a target owner leaves: the leader sheds it by recovery
    leader = cluster.proc(1)
    assert await try_rebalance(leader.ctx, leader.controller.assignable_instances()) == 3
    head = await cluster.cluster.snapshots.load()
    assert head is not None and head.assignment_version == 3
    return transition


def test_recovery_above_a_drain_settled_as_commit_here_clears_it() -> None:
    """Seed 965: this follower resolved its acked drain as Commit, then the head moved to a
    recovery generation above the drain's target before its watcher cleared the drain. The
    drain has nothing left to release: the watcher forgets it and follows the recovery (it
    used to ask for an Abort, which the local Commit refused on every tick, for good)."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        follower = cluster.proc(2)

        async def ack_and_commit_here(transition: AssignmentDrainTransition) -> None:
            await cluster.settle()  # every predecessor acks
            assert follower.watcher.active_local_drain == transition
            await follower.engine.resolve_local_source_drain(
                drain_id(transition), COMMIT, deadline=cluster.deadline()
            )

        transition = await drain_then_recovery_above_it(cluster, ack_and_commit_here)
        await cluster.tick(2)
        assert follower.watcher.active_local_drain is None
        assert follower.engine.registry().version == 3
        assert follower.engine.call_count("adopt_recovery_assignment") == 1
        # Not overturned.
        assert follower.engine.owned_source_drain_resolved(drain_id(transition), COMMIT)

    run(body)


def test_recovery_above_a_drain_its_watcher_never_acked_releases_the_engines_open_drain() -> None:
    """Seed 80914: a leader's own rotation prepared its local drain (its watcher never acked
    it: the leader was deposed first); the next leader settled the drain and recovered above
    it before this watcher saw the terminal. The watcher releases the drain the engine still
    holds open and follows the recovery; it used to keep the sources stopped for it, so every
    later drain failed to prepare ("local sources are stopped for drain 1->2") and the
    cluster wedged on the next draining head."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        cluster = await started(clock, store)
        deposed = cluster.proc(2)

        async def prepare_as_its_own_rotation(transition: AssignmentDrainTransition) -> None:
            await deposed.engine.prepare_local_source_drain(
                transition, deposed.engine.participant, deadline=cluster.deadline()
            )
            assert deposed.watcher.active_local_drain is None
            assert deposed.engine.open_source_drain() == transition

        transition = await drain_then_recovery_above_it(cluster, prepare_as_its_own_rotation)
        await cluster.tick(2)
        assert deposed.engine.open_source_drain() is None
        # Released (Abort resumes the stopped sources); the recovery restores every owned
        # vnode cold from its checkpoint, so the drain's own verdict no longer matters here.
        assert deposed.engine.owned_source_drain_resolved(drain_id(transition), ABORT)
        assert deposed.engine.registry().version == 3
        assert deposed.engine.call_count("adopt_recovery_assignment") == 1

    run(body)
