"""Rebalance invariants of the leader's durable writes (docs/protocols/rebalance.md): RB-16 (the
adoption lock is held until an ambiguous drain create settles, with no deadline) and RB-17
(pruning keeps the pair [v-1, v], snapshots before decisions). Real controllers, authority,
snapshot store and BaseEngines on memory://, faults from `store.faulty.FaultyStore`, a
simulated clock."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from laminar_cluster.assignment.model import next_draining, snapshot_fence
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.authority.assignment_decisions import assignment_drain_decision
from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.errors import Refused, StoreUnavailable, WriteOutcomeUnknown
from laminar_cluster.rebalance.audit.generation import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.history import prune_after
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from laminar_cluster.rebalance.rotation.graceful import execute_graceful_rotation
from laminar_cluster.store import (
    PutMode,
    PutResult,
    open_store,
)
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.rebalance.hooks_support import PassThroughStore, build, install
from tests.rebalance.hooks_support import Scenario as HookScenario
from tests.rebalance.scenario import CONFIG, Scenario, drive

V2_KEY = snapshot_path(2)


class SilentAfterLostCreate(PassThroughStore):
    """`inner` (a FaultyStore scripted to land the drain create and lose its answer); from that
    answer on, every request fails for `silence_s` of the clock."""

    def __init__(self, inner: FaultyStore, clock: Clock, silence_s: float) -> None:
        super().__init__(inner)
        self.clock, self.silence_s = clock, silence_s
        self.silent_until: float | None = None
        self.refused = 0

    async def before(self, op: str) -> None:
        """StoreUnavailable while silent."""
        if self.silent_until is not None and self.clock.monotonic() < self.silent_until:
            self.refused += 1
            raise StoreUnavailable(f"the store does not answer a {op}")

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        """A lost answer starts the silence."""
        try:
            return await super().put(key, body, mode)
        except WriteOutcomeUnknown:
            self.silent_until = self.clock.monotonic() + self.silence_s
            raise


def test_rb16_drain_create_holds_the_lock_until_settled() -> None:
    """The drain create lands but its answer is lost, and the store then answers nothing for
    three checkpoint timeouts: the rotation retries past every deadline it has, a concurrent
    adoption waits on the adoption lock the whole time, and the rotation then goes on."""

    async def main() -> None:
        # The acks arrive between simulated steps while store requests take real time: a
        # 10 s ack timeout (40 steps) leaves room for a loaded host (1 s failed at load 16).
        config = dataclasses.replace(CONFIG, drain_ack_timeout_s=10.0)
        scenario = await Scenario.start(
            open_store("memory://"), SimulatedClock(seed=5), (1, 2), config=config
        )
        await scenario.bring_up((1, 1, 1, 1))
        clock, cluster = scenario.clock, scenario.cluster
        v1 = await cluster.snapshots.load()
        assert v1 is not None
        faulty = FaultyStore(cluster.store, clock=clock, seed=1)
        faulty.fail_next(FaultKind.AFTER, op="put", key_prefix=V2_KEY)
        silence_s = 3 * scenario.config.checkpoint_timeout_s
        silent = SilentAfterLostCreate(faulty, clock, silence_s)
        ctx = dataclasses.replace(scenario.ctx(1), snapshots=AssignmentSnapshotStore(silent))
        engine = scenario.engines[1]
        adopted_at: list[float] = []

        async def adopt_meanwhile() -> None:
            """Once the create landed (under the lock), adopt v1 again: it takes the lock."""
            while silent.silent_until is None:  # the create has landed, under the lock
                await clock.sleep(0.01)
            await engine.adopt_assignment(v1, deadline=clock.monotonic() + 2 * silence_s)
            adopted_at.append(clock.monotonic())

        async with asyncio.TaskGroup() as group:
            group.create_task(adopt_meanwhile())
            rotation = execute_graceful_rotation(
                ctx, v1, (1, 2, 1, 2), cluster.participants([1, 2])
            )
            assert await drive(scenario, rotation, step_s=0.25) == 2

        assert silent.silent_until is not None
        assert adopted_at[0] >= silent.silent_until  # the lock was held through the silence
        assert silent.refused > silence_s / scenario.config.retry_delay_s / 2
        decision = await assignment_drain_decision(cluster.node(1).authority, 2)
        assert decision is not None
        assert decision.transition == await cluster.snapshots.load_drain_transition(2)

    asyncio.run(main())


def test_rb17_a_lagging_participant_keeps_the_version_it_runs() -> None:
    """Ours (RB-11, RB-17): node 2, a participant of v4, still reports v2 (its drain 2 -> 3 not
    yet resolved): committing v4 keeps v2, the predecessor that drain resolves against, instead
    of pruning below 3 (the sim's seed 6978 stalled for good without it). Once node 2 runs v4,
    the next prune keeps only the pair."""

    async def main() -> None:
        scenario = await build((1, 2), (1, 2, 1, 2))
        ctx, snapshots = scenario.ctx(1), scenario.cluster.snapshots
        await commit_next(scenario, (1, 1, 2, 2))  # v2, run everywhere
        v3 = await commit_next(scenario, (1, 2, 1, 2), lagging=(2,))
        v4 = await commit_next(scenario, (1, 1, 2, 2), lagging=(2,))
        assert [await snapshots.load_version(v) is not None for v in (1, 2, 3, 4)] == [
            False,
            True,
            True,
            True,
        ]
        for snapshot in (v3, v4):  # node 2 catches up edge by edge
            await install(scenario.ctx(2), snapshot)
        await prune_after(ctx, v4.assignment_version, ctx.controller.capture_leader_proof())
        assert [await snapshots.load_version(v) is not None for v in (2, 3, 4)] == [
            False,
            True,
            True,
        ]

    asyncio.run(main())


async def commit_next(
    scenario: HookScenario, owners: tuple[int, ...], *, lagging: tuple[int, ...] = ()
) -> AssignmentSnapshot:
    """A live Commit of the drain head -> `owners` by node 1, installed on every node but the
    `lagging` ones."""
    cluster = scenario.cluster
    head = await cluster.snapshots.load()
    assert head is not None
    proof = cluster.controller(1).capture_leader_proof()
    assert proof is not None
    drain = next_draining(head, owners, cluster.participants(owners), proof, now_ms=0)
    assert isinstance(
        await cluster.snapshots.save_if_version(drain, head.assignment_version), Rotated
    )
    handoff = await scenario.checkpoint(snapshot_fence(head))
    version = await finalize_drain_snapshot(
        scenario.ctx(1), drain, head, SourceDrainOutcome.COMMIT, handoff, FinalizeMode.LIVE
    )
    terminal = await cluster.snapshots.load()
    assert terminal is not None and terminal.assignment_version == version
    for node_id in sorted(set(scenario.contexts) - set(lagging)):
        await install(scenario.ctx(node_id), terminal)
    return terminal


def test_rb17_decisions_are_pruned_only_after_snapshots() -> None:
    """Committing v4 prunes below 3, but the snapshot delete of v2 fails: the decision floor
    stays where it was and v2's decision is still readable. The next prune removes both, and
    the pair [v3, v4] stays loadable and auditable."""

    async def main() -> None:
        faulty = FaultyStore(open_store("memory://"), clock=SimulatedClock(), seed=1)
        scenario = await build((1, 2), (1, 2, 1, 2), store=faulty)
        ctx, authority = scenario.ctx(1), scenario.cluster.node(1).authority
        for owners in ((1, 1, 2, 2), (1, 2, 1, 2)):
            await commit_next(scenario, owners)
        record = await authority.load_record()
        assert record is not None and record.assignment_decision_floor is not None
        before = record.assignment_decision_floor
        assert before.before_target_version == 2

        faulty.fail_next(FaultKind.BEFORE, op="delete", key_prefix=snapshot_path(2))
        v4 = await commit_next(scenario, (1, 1, 2, 2))
        record = await authority.load_record()
        assert record is not None and record.assignment_decision_floor == before
        assert await assignment_drain_decision(authority, 2) is not None

        await prune_after(ctx, v4.assignment_version, ctx.controller.capture_leader_proof())
        record = await authority.load_record()
        assert record is not None and record.assignment_decision_floor is not None
        assert record.assignment_decision_floor.before_target_version == 3
        with pytest.raises(Refused):  # compacted away
            await assignment_drain_decision(authority, 2)
        assert await scenario.cluster.snapshots.load_version(2) is None
        assert await scenario.cluster.snapshots.load_version(3) is not None
        head = await scenario.cluster.snapshots.load()
        assert head == v4
        audited = await audit_snapshot_authority_outcome(ctx, head, deadline=ctx.head_deadline())
        assert audited.terminal is not None
        assert audited.terminal.outcome is SourceDrainOutcome.COMMIT

    asyncio.run(main())
