"""Coordinated-recovery hooks, startup selection and graceful exit (RB §1.3, RB §4.17,
RB §4.18; RB-T65..RB-T69, RB-T71, RB-T72) and our stopped-recovery round for a missed ack quorum."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.assignment.model import next_draining, next_for_participants, snapshot_fence
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    assignment_drain_decision,
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.errors import CorruptRecord, Refused, StoreUnavailable
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.rebalance.coordinated import stopped as stopped_recovery
from laminar_cluster.rebalance.coordinated.hooks import (
    settle_source_drain_before_recovery_release,
    settle_stopped_source_drain_after_recovery_quorum,
)
from laminar_cluster.rebalance.coordinated.stopped import run_stopped_recovery_round
from laminar_cluster.rebalance.engine.base import ShuffleState
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.node.loop import rebalance_attempt
from laminar_cluster.rebalance.node.selection import (
    startup_committed_assignment,
)
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.store import open_store
from tests.rebalance.engine.recording import RecordingEngine
from tests.rebalance.hooks_support import (
    CONFIG,
    Scenario,
    StalledListStore,
    build,
    commit_terminal,
    drained,
    drive,
    listing,
    with_watchers,
)
from tests.rebalance.refusal_support import raises_because

OWNERS = (1, 2, 1, 2)


def stop_locally(scenario: Scenario, node_id: int) -> None:
    """Coordinated recovery's stop quorum reached this process (RB §4.18 preconditions)."""
    scenario.engine(node_id).enter_stopped_recovery()
    scenario.cluster.controller(node_id).set_recovering(True)


def test_rb_t65_stopped_recovery_aborts_draining_head() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        draining = await scenario.drain((1, 1, 1, 1))
        v1_fence = snapshot_fence(scenario.v1)
        with raises_because(Refused, Refusal.NOT_STOPPED):
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence)
        stop_locally(scenario, 1)
        assert (
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence) == 2
        )
        terminal = await scenario.cluster.snapshots.load()
        assert terminal is not None and not terminal.draining
        assert terminal.assignment_version == 2
        assert (terminal.owners, terminal.participants) == (
            scenario.v1.owners,
            scenario.v1.participants,
        )
        decision = await assignment_drain_decision(scenario.cluster.node(1).authority, 2)
        assert decision is not None and decision.verdict is AssignmentVerdict.ABORT
        assert decision.transition == draining.drain_transition
        # Topology only: the stopped generation neither adopts nor resolves its sources.
        assert scenario.engine(1).registry().version == 1
        assert scenario.engine(1).call_count("resolve_local_source_drain") == 0

    asyncio.run(main())


def test_rb_t66_stopped_recovery_idempotent_after_abort() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        await scenario.drain((1, 1, 1, 1))
        stop_locally(scenario, 1)
        v1_fence = snapshot_fence(scenario.v1)
        assert (
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence) == 2
        )
        before = await listing(scenario.store)
        assert (
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence) == 2
        )
        assert await listing(scenario.store) == before
        assert scenario.engine(1).registry().version == 1

    asyncio.run(main())


def test_rb_t66_stopped_recovery_idempotent_after_commit_with_intact_pin() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        await commit_terminal(scenario)
        registry = scenario.engine(1).registry()
        stop_locally(scenario, 1)
        v1_fence = snapshot_fence(scenario.v1)
        before = await listing(scenario.store)
        assert (
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence) == 2
        )
        assert await listing(scenario.store) == before
        assert scenario.engine(1).registry() == registry
        # A checkpoint under the target consumes the pin: the Commit is no longer exact.
        target = await scenario.cluster.snapshots.load()
        assert target is not None
        scenario.engine(1).leave_stopped_recovery()
        await scenario.checkpoint(snapshot_fence(target))
        scenario.engine(1).enter_stopped_recovery()
        with raises_because(Refused, Refusal.HANDOFF_PIN_LOST):
            await settle_stopped_source_drain_after_recovery_quorum(scenario.ctx(1), v1_fence)

    asyncio.run(main())


def test_stopped_recovery_settles_nothing_at_the_predecessor_and_refuses_other_rounds() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        stop_locally(scenario, 1)
        ctx, v1_fence = scenario.ctx(1), snapshot_fence(scenario.v1)
        assert await settle_stopped_source_drain_after_recovery_quorum(ctx, v1_fence) is None
        await scenario.drain((1, 1, 1, 1))
        other = msgspec.structs.replace(v1_fence, assignment_version=3)
        with raises_because(Refused, Refusal.NOT_STOPPED_PREDECESSOR):
            await settle_stopped_source_drain_after_recovery_quorum(ctx, other)
        assert await settle_stopped_source_drain_after_recovery_quorum(ctx, v1_fence) == 2
        with raises_because(Refused, Refusal.PREDECESSOR_SUPERSEDED):
            await settle_stopped_source_drain_after_recovery_quorum(
                ctx, msgspec.structs.replace(v1_fence, assignment_version=5)
            )

    asyncio.run(main())


def test_rb_t67_stopped_recovery_yields_to_commit() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        draining = await scenario.drain((1, 1, 1, 1))
        transition = draining.drain_transition
        assert transition is not None
        handoff = await scenario.checkpoint(transition.predecessor)
        proof = transition.leader
        recorded = await record_assignment_drain_decision(
            scenario.cluster.node(1).authority,
            proof,
            new_drain_decision(transition, proof, AssignmentVerdict.COMMIT, handoff),
            deadline=scenario.cluster.deadline(),
        )
        assert isinstance(recorded, DecisionCreated)
        stop_locally(scenario, 1)
        with raises_because(Refused, Refusal.COMMIT_WINNER):
            await settle_stopped_source_drain_after_recovery_quorum(
                scenario.ctx(1), transition.predecessor
            )
        assert await scenario.cluster.snapshots.load() == draining

    asyncio.run(main())


def test_rb_t68_live_retry_yields_to_recovery() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        await scenario.drain((1, 1, 1, 1))
        engine = scenario.engine(1)
        v1_fence = snapshot_fence(scenario.v1)
        scenario.cluster.controller(1).set_recovering(True)
        with raises_because(Refused, Refusal.YIELDED_TO_RECOVERY):
            await try_rebalance(scenario.ctx(1), [1, 2])
        assert await assignment_drain_decision(scenario.cluster.node(1).authority, 2) is None
        head = await scenario.cluster.snapshots.load()
        assert head is not None and head.draining
        # Suspended, not invalidated: the same certificate resumes.
        assert engine.shuffle_state() is ShuffleState.SUSPENDED
        assert engine.installed_fence() == v1_fence
        assert engine.cluster_intake_fenced()
        activation = await engine.activate_authority(
            v1_fence, None, engine.authority_revision(), deadline=scenario.cluster.deadline()
        )
        assert activation.installed and engine.shuffle_state() is ShuffleState.ACTIVE

    asyncio.run(main())


class ReplacementSourceEngine(RecordingEngine):
    """A BaseEngine whose replacement source task (after coordinated recovery) may have
    exited before it committed the drain verdict, as a real connector can report."""

    replacement_exited = False
    exited = StoreUnavailable("replacement source task exited before committing drain")

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        if self.replacement_exited:
            raise self.exited
        await super().resolve_local_source_drain(drain, outcome, deadline=deadline)


def test_rb_t69_release_reapplies_terminal() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS, engine_type=ReplacementSourceEngine)
        terminal = await commit_terminal(scenario)
        transition = await scenario.cluster.snapshots.load_drain_transition(2)
        assert transition is not None
        round_ = drain_id(transition)
        ctx, engine = scenario.ctx(2), scenario.engine(2)
        assert isinstance(engine, ReplacementSourceEngine)
        ctx.controller.publish_checkpoint_drain_transition(transition)  # node 2 had acked
        stop_locally(scenario, 2)
        deadline = ctx.head_deadline()
        with raises_because(Refused, Refusal.HEAD_MOVED):
            await settle_source_drain_before_recovery_release(
                ctx, snapshot_fence(scenario.v1), deadline=deadline
            )
        fence = snapshot_fence(terminal)
        assert await settle_source_drain_before_recovery_release(ctx, fence, deadline=deadline) == 2
        assert engine.registry().version == 2
        assert engine.owned_source_drain_resolved(round_, SourceDrainOutcome.COMMIT)
        assert ctx.controller.checkpoint_drain_transition() is None
        # A new replacement source generation after the marker was cleared: resolved again.
        assert await settle_source_drain_before_recovery_release(ctx, fence, deadline=deadline) == 2
        assert engine.call_count("resolve_local_source_drain") == 2
        engine.replacement_exited = True
        ctx.controller.publish_checkpoint_drain_transition(transition)
        with pytest.raises(StoreUnavailable) as exited:
            await settle_source_drain_before_recovery_release(ctx, fence, deadline=deadline)
        assert exited.value is engine.exited  # the engine's own error, unwrapped
        assert ctx.controller.checkpoint_drain_transition() == transition  # Release stays blocked

    asyncio.run(main())


def test_release_refuses_a_draining_head_and_open_intake() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        await scenario.drain((1, 1, 1, 1))
        ctx = scenario.ctx(2)
        fence = snapshot_fence(scenario.v1)
        deadline = ctx.head_deadline()
        ctx.controller.set_recovering(True)
        with raises_because(Refused, Refusal.INTAKE_OPEN):
            await settle_source_drain_before_recovery_release(ctx, fence, deadline=deadline)
        scenario.engine(2).enter_stopped_recovery()
        with raises_because(Refused, Refusal.RELEASE_ON_DRAINING_HEAD):
            await settle_source_drain_before_recovery_release(ctx, fence, deadline=deadline)

    asyncio.run(main())


def test_rb_t71_startup_selection() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        ctx = scenario.ctx(1)
        assert await startup_committed_assignment(ctx, scenario.v1) == scenario.v1
        draining = await scenario.drain((1, 1, 1, 1))
        assert await startup_committed_assignment(ctx, draining) == scenario.v1

    asyncio.run(main())


def test_rb_t71_startup_refuses_a_forged_transition() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        proof = scenario.cluster.controller(1).capture_leader_proof()
        assert proof is not None
        forged_v1 = msgspec.structs.replace(scenario.v1, owners=(2, 1, 2, 1))
        forged = next_draining(
            forged_v1,
            (1, 1, 1, 1),
            scenario.cluster.participants([1]),
            proof,
            now_ms=scenario.clock.wall_ms(),
        )
        result = await scenario.cluster.snapshots.save_if_version(forged, 1)
        assert isinstance(result, Rotated)
        with raises_because(CorruptRecord, Refusal.RETAINED_PREDECESSOR_NOT_BOUND):
            await startup_committed_assignment(scenario.ctx(1), forged)

    asyncio.run(main())


def test_rb_t72_wait_until_drained_matrix() -> None:
    async def main() -> None:
        scenario = await build((1, 2, 3), OWNERS)
        clock = scenario.clock
        # No head: keeps polling (fails closed) until the deadline.
        empty = AssignmentSnapshotStore(open_store("memory://"))
        start = clock.monotonic()
        assert not await drained(scenario, 3, authority=True, snapshots=empty)
        assert clock.monotonic() >= start + 1.0
        # A LIST that never answers: False once the deadline passes, not later.
        stalled = AssignmentSnapshotStore(StalledListStore(scenario.store))
        start = clock.monotonic()
        assert not await drained(scenario, 3, authority=True, snapshots=stalled)
        assert start + 1.0 <= clock.monotonic() < start + 1.0 + CONFIG.watcher_poll_s
        # A v1 head not owning `me` needs no authority; a wrong vnode count never drains.
        assert await drained(scenario, 3, authority=False)
        assert not await drained(scenario, 3, authority=True, vnode_count=2)
        assert not await drained(scenario, 2, authority=True)
        # A draining target never transfers ownership.
        await scenario.drain((1, 1, 1, 1))
        assert not await drained(scenario, 2, authority=True)

    asyncio.run(main())


def test_rb_t72_wait_until_drained_needs_the_authority_for_a_terminal() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        await commit_terminal(scenario, (1, 1, 1, 1))
        assert not await drained(scenario, 2, authority=False)
        assert await drained(scenario, 2, authority=True)
        assert not await drained(scenario, 1, authority=True)

    asyncio.run(main())


def test_wait_until_drained_rejects_a_bare_successor() -> None:
    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        bare = next_for_participants(
            scenario.v1,
            (1, 1, 1, 1),
            scenario.cluster.participants([1]),
            now_ms=scenario.clock.wall_ms(),
        )
        assert isinstance(await scenario.cluster.snapshots.save_if_version(bare, 1), Rotated)
        assert not await drained(scenario, 2, authority=True)

    asyncio.run(main())


def test_stopped_recovery_round_after_an_ack_timeout_recovers_the_dead_owner() -> None:
    async def main() -> None:
        scenario = await build((1, 2, 3), OWNERS)
        cluster, ctx = scenario.cluster, scenario.ctx(1)
        controller = cluster.controller(1)
        await scenario.checkpoint(snapshot_fence(scenario.v1))  # the cut recovery restores
        # Node 2 never acks: the rotation keeps the draining head and asks for recovery.
        with raises_because(Refused, Refusal.ACK_QUORUM_MISSED):
            await drive(scenario.clock, try_rebalance(ctx, [1, 2, 3]))
        draining = await cluster.snapshots.load()
        assert draining is not None and draining.draining and controller.is_recovering()
        # Live retries yield to the recovery authority.
        with raises_because(Refused, Refusal.YIELDED_TO_RECOVERY):
            await try_rebalance(ctx, [1, 2, 3])
        # Node 2 still renews its process lease: the stop quorum waits for it.
        assert await run_stopped_recovery_round(ctx) is None
        assert await cluster.snapshots.load() == draining
        cluster.stop(2)
        await cluster.advance(cluster.process_ttl_s * 2.5)
        assert await run_stopped_recovery_round(ctx) == 2
        terminal = await cluster.snapshots.load()
        assert terminal is not None and not terminal.draining
        assert (terminal.owners, terminal.participants) == (
            scenario.v1.owners,
            scenario.v1.participants,
        )
        decision = await assignment_drain_decision(cluster.node(1).authority, 2)
        assert decision is not None and decision.verdict is AssignmentVerdict.ABORT
        engine = scenario.engine(1)
        transition = draining.drain_transition
        assert transition is not None
        assert engine.owned_source_drain_resolved(drain_id(transition), SourceDrainOutcome.ABORT)
        assert engine.registry().version == 2
        assert not controller.is_recovering() and not engine.coordinated_recovery_in_progress()
        assert controller.checkpoint_drain_transition() is None
        # The next attempt sees the rollback generation and recovers the dead owner.
        live = controller.assignable_instances()
        assert 2 not in live
        assert await try_rebalance(ctx, live) == 3
        recovered = await cluster.snapshots.load()
        assert recovered is not None and recovered.assignment_version == 3
        assert 2 not in recovered.owners
        assert {p.node_id for p in recovered.participants} <= {1, 3}

    asyncio.run(main())


def test_stopped_recovery_round_releases_a_drain_settled_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Simulation seeds 20287 and 23767: a round made the drain's Abort terminal durable and
    then failed in its release step, so the leader stayed recovering. The terminal was later
    applied locally (the watcher's settlement, here the release hook itself). The next round
    finds the drain settled and the engine running it, and releases recovery mode; it used to
    return on the non-draining head and leave the leader recovering for good, deferring every
    later rotation."""

    async def main() -> None:
        scenario = await build((1, 2, 3), OWNERS)
        cluster, ctx = scenario.cluster, scenario.ctx(1)
        controller = cluster.controller(1)
        await scenario.checkpoint(snapshot_fence(scenario.v1))
        with raises_because(Refused, Refusal.ACK_QUORUM_MISSED):
            await drive(scenario.clock, try_rebalance(ctx, [1, 2, 3]))
        draining = await cluster.snapshots.load()
        assert draining is not None and draining.drain_transition is not None
        assert controller.stopped_recovery_request() == draining.drain_transition
        cluster.stop(2)
        await cluster.advance(cluster.process_ttl_s * 2.5)

        injected = StoreUnavailable("injected: release failed after the terminal was durable")

        async def release_fails(*args: object, **kwargs: object) -> None:
            raise injected

        with monkeypatch.context() as patched:
            patched.setattr(
                stopped_recovery, "settle_source_drain_before_recovery_release", release_fails
            )
            with pytest.raises(StoreUnavailable) as failed:
                await run_stopped_recovery_round(ctx)
            assert failed.value is injected
        terminal = await cluster.snapshots.load()
        assert terminal is not None and not terminal.draining and terminal.assignment_version == 2
        assert controller.is_recovering()
        await settle_source_drain_before_recovery_release(
            ctx, snapshot_fence(terminal), deadline=ctx.head_deadline()
        )
        assert scenario.engine(1).registry().version == 2

        assert await run_stopped_recovery_round(ctx) is None
        assert not controller.is_recovering()
        assert controller.stopped_recovery_request() is None
        # The next attempt recovers the dead owner from the rollback.
        live = controller.assignable_instances()
        assert await try_rebalance(ctx, live) == 3

    asyncio.run(main())


def test_deposed_leader_left_recovering_follows_and_releases_when_it_leads_again() -> None:
    """A leader that misses an ack quorum and then loses leadership keeps its recovering flag
    as a follower (stopped-recovery rounds run on the leader only). The next leader rolls the
    drain back; the old leader's watcher follows with open intake; when it leads again, its
    first attempt releases recovery mode (the drain it asked recovery for is settled and its
    engine runs the rollback) and the rotation it had opened then commits."""

    async def main() -> None:
        scenario = await build((1, 2, 3), OWNERS)
        cluster, controller = scenario.cluster, scenario.cluster.controller(1)
        await scenario.checkpoint(snapshot_fence(scenario.v1))
        with raises_because(Refused, Refusal.ACK_QUORUM_MISSED):
            await drive(scenario.clock, try_rebalance(scenario.ctx(1), [1, 2, 3]))
        assert controller.is_recovering() and controller.stopped_recovery_request() is not None

        async def rounds() -> tuple[int | None, int | None]:
            await cluster.elect(3, driven=True)
            rollback = await rebalance_attempt(scenario.ctx(3), [1, 2, 3])
            await scenario.clock.sleep(1.0)  # the watchers adopt the rollback
            assert scenario.engine(1).registry().version == 2
            assert not scenario.engine(1).cluster_intake_fenced()
            await cluster.elect(1, driven=True)
            rotation = await rebalance_attempt(scenario.ctx(1), [1, 2, 3])
            await scenario.clock.sleep(1.0)
            return rollback, rotation

        rollback, rotation = await with_watchers(scenario, rounds())
        assert (rollback, rotation) == (2, 3)
        head = await cluster.snapshots.load()
        assert head is not None and not head.draining
        assert list(head.owners) == rendezvous_assignment(len(OWNERS), [1, 2, 3])
        assert not controller.is_recovering() and controller.stopped_recovery_request() is None
        assert all(scenario.engine(n).registry().version == 3 for n in (1, 2, 3))

    asyncio.run(main())
