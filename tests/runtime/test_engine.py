"""`StreamEngine` (runtime/engine.py), the reference `DataPlane`, embedded in a `BaseEngine` whose
`VnodeHost` runs it, over memory:// with the real `EventLog`: it consumes only the partitions of
its active vnodes, keeps processing while a cut is held until `resolve` (the cut holds the state
and output at the cut only), re-emits aborted output, restores newly owned vnodes (handoff and
recovery) and holds them back while restoring, and stops consuming revoking partitions during a
source drain (DC §1.7, DC §1.9, DC §3.2-§3.5).

Node 1 (boot UUID(int=11)) is the local process. V1 gives it vnodes 0 and 1 of 4; with 8
partitions it consumes partitions 0, 4 (vnode 0) and 1, 5 (vnode 1). The in-test restorer
stands in for coordinator.restore (test_engine_handoff.py uses the real coordinator).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import CheckpointAttempt, RecoveryCapsuleRef
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.coordinator.host import CheckpointHost, Cut, VnodeCut
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import DeadlineExceeded, Refused
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.data_plane import DataPlane
from laminar_cluster.rebalance.engine.restores import (
    HandoffRestore,
    InitialRestore,
    RecoveryRestore,
    RestoredCuts,
    RestoreSource,
)
from laminar_cluster.rebalance.engine.vnode_host import VnodeHost
from laminar_cluster.rebalance.interfaces import INITIAL_STATE, RebalanceEngine, SourceDrainOutcome
from laminar_cluster.runtime.engine import EngineView, StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig, EngineProgress
from laminar_cluster.runtime.output import aggregate_committed, decode_aggregate_records
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import open_store
from tests.assignment.snapshot_support import draining, participant, proof, snapshot

ME = participant(1)
V1 = snapshot(1, [1, 1, 2, 2])
PARTITIONS = 8
MINE = (0, 1, 4, 5)
REF = RecoveryCapsuleRef(epoch=9, checkpoint_id=9, sha256="9a" * 32, len=10)
CONFIG = EngineConfig(batch_events=3, read_parallelism=3, idle_s=0.005, retry_s=0.01)


@dataclass
class FakeRestorer:
    """Returns `cuts` (None: start empty); blocks while `gate` is set and not released."""

    cuts: dict[int, VnodeCut | None] = field(default_factory=dict)
    calls: list[tuple[RestoreSource, tuple[int, ...]]] = field(default_factory=list)
    gate: asyncio.Event | None = None

    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        self.calls.append((source, vnodes))
        if self.gate is not None:
            async with RealClock().timeout_at(deadline):
                await self.gate.wait()
        return {vnode: self.cuts.get(vnode) for vnode in vnodes}


@dataclass
class Rig:
    clock: RealClock
    log: EventLog
    view: EngineView
    stream: StreamEngine
    processor: KeyedAggregation
    restorer: FakeRestorer

    @property
    def engine(self) -> BaseEngine:
        return self.view.engine

    @property
    def host(self) -> VnodeHost:
        return self.view.host

    def progress(self) -> EngineProgress:
        return self.view.progress()

    def deadline(self, seconds: float = 10.0) -> float:
        return self.clock.monotonic() + seconds

    async def append(self, partition: int, keys: list[int], values: list[int]) -> None:
        await self.log.append(partition, keys, values, deadline=self.deadline())

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        end = self.deadline(5.0)
        while not predicate():
            assert self.clock.monotonic() < end, f"timed out waiting for {what}"
            await self.clock.sleep(0.002)

    async def settle(self) -> None:
        """Give the run loop time to act on anything it could (used to show it did not)."""
        await self.clock.sleep(0.05)

    def prepare(self, epoch: int, current: AssignmentSnapshot = V1) -> CheckpointPrepare:
        return CheckpointPrepare(
            version=1,
            attempt=CheckpointAttempt.canonical(epoch),
            fence=snapshot_fence(current),
            leader_proof=proof(),
            drain_transition=None,
        )

    async def activate(self, current: AssignmentSnapshot = V1) -> None:
        engine = self.engine
        await engine.adopt_assignment(current, deadline=self.deadline())
        activation = await engine.activate_authority(
            snapshot_fence(current), None, engine.authority_revision(), deadline=self.deadline()
        )
        assert activation.installed

    def events(self) -> int:
        return self.progress().events_processed


def run(
    body: Callable[[Rig], Awaitable[None]],
    *,
    restorer: FakeRestorer | None = None,
    activate: bool = True,
    partitions: int | None = PARTITIONS,
) -> None:
    async def main() -> None:
        clock = RealClock()
        log = EventLog(open_store("memory://"), clock=clock)
        processor = KeyedAggregation()
        fake = restorer or FakeRestorer()
        stream = StreamEngine(
            clock=clock, log=log, processor=processor, partitions=partitions, config=CONFIG
        )
        view = embed_plane(clock=clock, participant=ME, plane=stream, restorer=fake, config=CONFIG)
        rig = Rig(clock, log, view, stream, processor, fake)
        async with running(view.host):
            if activate:
                await rig.activate()
            await body(rig)

    asyncio.run(main())


@asynccontextmanager
async def running(host: VnodeHost) -> AsyncIterator[None]:
    shutdown = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(host.run(shutdown))
        try:
            yield
        finally:
            shutdown.set()


async def fill(rig: Rig, per_partition: int = 5) -> dict[int, tuple[int, int]]:
    """Append `per_partition` events to every partition; the totals node 1 should reach."""
    expected: dict[int, tuple[int, int]] = {}
    for partition in range(PARTITIONS):
        keys = [partition % 3 + i % 2 for i in range(per_partition)]
        values = [partition * 100 + i for i in range(per_partition)]
        await rig.append(partition, keys, values)
        if partition in MINE:
            for key, value in zip(keys, values, strict=True):
                count, total = expected.get(key, (0, 0))
                expected[key] = (count + 1, total + value)
    return expected


def merged(rig: Rig) -> dict[int, tuple[int, int]]:
    totals: dict[int, tuple[int, int]] = {}
    for vnode in rig.processor.vnodes():
        for key, (count, total) in rig.processor.totals(vnode).items():
            before = totals.get(key, (0, 0))
            totals[key] = (before[0] + count, before[1] + total)
    return totals


def output_of(cut: Cut) -> dict[int, tuple[int, int]]:
    """The cut's output summed per key (each vnode emits its own records for a key)."""
    return aggregate_committed(decode_aggregate_records(cut.output))


# -- interfaces --------------------------------------------------------------------------------


def test_embedded_stream_engine_is_a_data_plane_its_engine_and_host_the_control_seams() -> None:
    def typed(engine: RebalanceEngine, host: CheckpointHost, plane: DataPlane) -> None:
        assert host.local_participant() == ME
        assert host.running_fence() == snapshot_fence(V1)
        assert plane.capture((0, 1))().vnodes.keys() == {0, 1}

    async def body(rig: Rig) -> None:
        await rig.until(lambda: rig.progress().restores == 2, "the first restore")
        typed(rig.engine, rig.host, rig.stream)
        assert rig.engine.installed_fence() == snapshot_fence(V1)

    run(body)


# -- processing --------------------------------------------------------------------------------


def test_engine_processes_owned_partitions_only() -> None:
    async def body(rig: Rig) -> None:
        expected = await fill(rig)
        await rig.until(lambda: rig.events() == 5 * len(MINE), "owned events")
        await rig.settle()
        progress = rig.progress()
        assert progress.events_processed == 20
        assert progress.offsets == dict.fromkeys(MINE, 5)
        assert merged(rig) == expected
        assert rig.processor.vnodes() == (0, 1)
        assert await rig.stream.source_lag(deadline=rig.deadline()) == dict.fromkeys(MINE, 0)
        assert rig.restorer.calls == [(HandoffRestore(), (0, 1))]

    run(body)


def test_engine_does_not_consume_before_its_fence_is_activated() -> None:
    async def body(rig: Rig) -> None:
        await rig.engine.adopt_assignment(V1, deadline=rig.deadline())
        await fill(rig)
        await rig.settle()
        assert rig.events() == 0 and rig.engine.running_fence() is None
        await rig.activate()
        await rig.until(lambda: rig.events() == 20, "events after activation")
        rig.engine.set_source_gate(True)
        await rig.append(0, [1], [1])
        await rig.settle()
        assert rig.events() == 20

    run(body, activate=False)


def test_engine_learns_the_partition_count_from_the_log() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(4, [1, 2], [3, 4])
        await rig.until(lambda: rig.progress().restores == 2, "restores without a layout")
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert {v: dict(part.offsets) for v, part in cut.vnodes.items()} == {0: {}, 1: {}}
        await rig.host.resolve(CheckpointAttempt.canonical(1), True, deadline=rig.deadline())
        await rig.settle()
        assert rig.events() == 0 and not rig.stream.partitions_known
        await rig.log.declare_partitions(PARTITIONS, deadline=rig.deadline())
        await rig.until(lambda: rig.events() == 2, "events once the layout is declared")
        assert rig.progress().offsets == {0: 0, 1: 0, 4: 2, 5: 0}

    run(body, partitions=None)


# -- cuts --------------------------------------------------------------------------------------


def test_processing_goes_on_while_a_cut_is_held() -> None:
    async def body(rig: Rig) -> None:
        expected = await fill(rig)
        await rig.until(lambda: rig.events() == 20, "owned events")
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert set(cut.vnodes) == {0, 1}
        assert dict(cut.vnodes[0].offsets) == {0: 5, 4: 5}
        assert dict(cut.vnodes[1].offsets) == {1: 5, 5: 5}
        assert output_of(cut) == expected
        # Held: new events are processed but are not part of the cut; the same attempt gets the
        # same cut, another is refused until this one resolves.
        await rig.append(0, [7], [70])
        await rig.until(lambda: rig.events() == 21, "the event after the cut")
        assert rig.progress().holding_cut == CheckpointAttempt.canonical(1)
        assert await rig.host.cut(rig.prepare(1), deadline=rig.deadline()) is cut
        with pytest.raises(Refused, match="not resolved"):
            await rig.host.cut(rig.prepare(2), deadline=rig.deadline())
        fresh = KeyedAggregation()
        fresh.restore(0, cut.vnodes[0].state)
        assert 7 not in fresh.totals(0)  # the cut's state is the state at the cut
        await rig.host.resolve(CheckpointAttempt.canonical(1), True, deadline=rig.deadline())
        second = await rig.host.cut(rig.prepare(2), deadline=rig.deadline())
        assert output_of(second) == {7: (1, 70)}  # committed output is history
        assert dict(second.vnodes[0].offsets) == {0: 6, 4: 5}
        assert rig.progress().commits == 1

    run(body)


def test_an_abort_re_emits_the_cut_merged_with_what_was_processed_while_it_was_held() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(0, [1, 2], [10, 20])
        await rig.until(lambda: rig.events() == 2, "first events")
        first = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        await rig.append(0, [1], [5])
        await rig.until(lambda: rig.events() == 3, "an event while the cut is held")
        await rig.host.resolve(CheckpointAttempt.canonical(1), False, deadline=rig.deadline())
        assert output_of(first) == {1: (1, 10), 2: (1, 20)}
        second = await rig.host.cut(rig.prepare(2), deadline=rig.deadline())
        assert output_of(second) == {1: (2, 15), 2: (1, 20)}
        await rig.append(1, [2], [1])
        await rig.until(lambda: rig.events() == 4, "an event while the second cut is held")
        await rig.host.resolve(CheckpointAttempt.canonical(2), True, deadline=rig.deadline())
        third = await rig.host.cut(rig.prepare(3), deadline=rig.deadline())
        assert output_of(third) == {2: (1, 1)}  # exactly what followed the committed cut

    run(body)


def test_dc15_a_vnode_restored_empty_and_untouched_is_cut_without_state() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(0, [1], [10])
        await rig.until(lambda: rig.events() == 1, "an event of vnode 0")
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert cut.vnodes[0].state is not None
        assert cut.vnodes[1] == VnodeCut(state=None, offsets={1: 0, 5: 0})
        assert output_of(cut) == {1: (1, 10)}
        await rig.host.resolve(CheckpointAttempt.canonical(1), True, deadline=rig.deadline())
        await rig.append(5, [2], [20])
        await rig.until(lambda: rig.events() == 2, "an event of vnode 1")
        second = await rig.host.cut(rig.prepare(2), deadline=rig.deadline())
        assert second.vnodes[1].state is not None
        assert dict(second.vnodes[1].offsets) == {1: 0, 5: 1}
        assert output_of(second) == {2: (1, 20)}

    run(body)


def test_cut_state_restores_into_a_fresh_processor() -> None:
    async def body(rig: Rig) -> None:
        await fill(rig)
        await rig.until(lambda: rig.events() == 20, "owned events")
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        fresh = KeyedAggregation()
        for vnode, part in cut.vnodes.items():
            fresh.restore(vnode, part.state)
            assert fresh.totals(vnode) == rig.processor.totals(vnode)

    run(body)


def test_abort_keeps_output_pending_and_the_next_cut_re_emits_it() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(0, [1, 2], [10, 20])
        await rig.until(lambda: rig.events() == 2, "first events")
        first = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert output_of(first) == {1: (1, 10), 2: (1, 20)}
        await rig.host.resolve(CheckpointAttempt.canonical(1), False, deadline=rig.deadline())
        await rig.append(1, [1], [5])
        await rig.until(lambda: rig.events() == 3, "the event after the abort")
        second = await rig.host.cut(rig.prepare(2), deadline=rig.deadline())
        assert output_of(second) == {1: (2, 15), 2: (1, 20)}
        await rig.host.resolve(CheckpointAttempt.canonical(2), True, deadline=rig.deadline())
        third = await rig.host.cut(rig.prepare(3), deadline=rig.deadline())
        assert output_of(third) == {}
        assert (rig.progress().aborts, rig.progress().commits) == (1, 1)

    run(body)


def test_cut_refuses_a_fence_it_does_not_run() -> None:
    async def body(rig: Rig) -> None:
        other = snapshot(2, [1, 2, 2, 2])
        with pytest.raises(Refused, match="not the fence"):
            await rig.host.cut(rig.prepare(1, other), deadline=rig.deadline())
        rig.engine.suspend_shuffle_fence()
        with pytest.raises(Refused, match="not the fence"):
            await rig.host.cut(rig.prepare(1), deadline=rig.deadline())

    run(body)


def test_resolve_of_an_attempt_not_held_is_a_no_op() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(0, [1], [1])
        await rig.until(lambda: rig.events() == 1, "an event")
        await rig.host.resolve(CheckpointAttempt.canonical(4), True, deadline=rig.deadline())
        cut = await rig.host.cut(rig.prepare(5), deadline=rig.deadline())
        assert output_of(cut) == {1: (1, 1)}

    run(body)


# -- restores ----------------------------------------------------------------------------------


def test_restoring_vnodes_neither_process_nor_emit_and_hold_the_cut() -> None:
    gate = asyncio.Event()
    restorer = FakeRestorer(cuts={1: VnodeCut(state=b"", offsets={})}, gate=gate)
    restorer.cuts = {0: None, 1: None}

    async def body(rig: Rig) -> None:
        await fill(rig)
        await rig.until(lambda: len(rig.restorer.calls) == 1, "the restore to start")
        await rig.settle()
        assert rig.events() == 0
        assert rig.progress().restoring_vnodes == 2
        ready = await rig.engine.local_vnode_state_is_ready(
            snapshot_fence(V1), deadline=rig.deadline()
        )
        assert not ready
        with pytest.raises(DeadlineExceeded):
            await rig.host.cut(rig.prepare(1), deadline=rig.deadline(0.1))
        gate.set()
        await rig.until(lambda: rig.events() == 20, "events after the restore")
        assert await rig.engine.local_vnode_state_is_ready(
            snapshot_fence(V1), deadline=rig.deadline()
        )

    run(body, restorer=restorer)


def test_handoff_restore_continues_from_the_committed_cut() -> None:
    """Node 2 ran vnodes 0 and 1 up to a committed cut; node 1 acquires them and goes on from
    its offsets, so the two sides together count every event exactly once."""

    async def body(rig: Rig) -> None:
        await rig.until(lambda: rig.progress().restores == 2, "the handoff restore")
        await rig.settle()
        assert rig.events() == 0  # partition 0 and 4 are consumed up to the cut
        await rig.append(0, [3], [30])
        await rig.until(lambda: rig.events() == 1, "the event after the cut")
        assert rig.processor.totals(0) == {1: (2, 11), 3: (1, 30)}
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert output_of(cut) == {3: (1, 30)}  # the restored state is history
        assert dict(cut.vnodes[0].offsets) == {0: 3, 4: 0}

    previous = KeyedAggregation()
    previous.add(0, (1, 1), (5, 6))
    restorer = FakeRestorer(cuts={0: VnodeCut(state=previous.snapshot(0), offsets={0: 2}), 1: None})

    async def seeded(rig: Rig) -> None:
        await rig.append(0, [1, 1], [5, 6])  # offsets 0 and 1: inside the committed cut
        await rig.activate()
        await body(rig)

    run(seeded, restorer=restorer, activate=False)


def test_recovery_generation_restores_every_owned_vnode_cold() -> None:
    async def body(rig: Rig) -> None:
        await rig.append(0, [1], [1])
        await rig.until(lambda: rig.events() == 1, "an event")
        await rig.engine.fault_for_recovery_assignment()
        assert rig.processor.vnodes() == () and rig.progress().owned_vnodes == 0
        recovered = snapshot(2, [1, 1, 1, 2])
        await rig.engine.adopt_recovery_assignment(recovered, REF, deadline=rig.deadline())
        await rig.until(lambda: len(rig.restorer.calls) == 2, "the recovery restore")
        assert rig.restorer.calls[-1] == (RecoveryRestore(REF), (0, 1, 2))

    run(body)


def test_recovery_generation_on_the_initial_state_restores_empty() -> None:
    """LA-20: a recovery decided before any cluster checkpoint committed: every owned vnode
    restores through InitialRestore (empty, offset 0), never from a later handoff read."""

    async def body(rig: Rig) -> None:
        await rig.engine.fault_for_recovery_assignment()
        recovered = snapshot(2, [1, 1, 1, 2])
        await rig.engine.adopt_recovery_assignment(
            recovered, INITIAL_STATE, deadline=rig.deadline()
        )
        await rig.until(
            lambda: (InitialRestore(), (0, 1, 2)) in rig.restorer.calls, "the recovery restore"
        )
        assert all(not isinstance(source, RecoveryRestore) for source, _ in rig.restorer.calls)

    run(body)


def test_adoption_drops_vnodes_no_longer_owned_and_restores_new_ones() -> None:
    async def body(rig: Rig) -> None:
        await fill(rig)
        await rig.until(lambda: rig.events() == 20, "owned events")
        await rig.activate(snapshot(2, [1, 2, 1, 2]))  # vnode 1 leaves, vnode 2 arrives
        await rig.until(lambda: rig.progress().restores == 3, "vnode 2 restored")
        assert rig.restorer.calls[-1] == (HandoffRestore(), (2,))
        await rig.until(lambda: rig.events() == 30, "vnode 2's events")
        assert rig.processor.vnodes() == (0, 2)
        assert set(rig.progress().offsets) == {0, 4, 2, 6}

    run(body)


# -- source drains -----------------------------------------------------------------------------


async def drain_vnode_1(rig: Rig) -> AssignmentSnapshot:
    """Prepare the drain of V1 to [1, 2, 2, 2]: vnode 1 (partitions 1, 5) leaves node 1."""
    await rig.until(lambda: rig.progress().restores == 2, "the first restore")
    drain = draining(V1, [1, 2, 2, 2])
    assert drain.drain_transition is not None
    rig.engine.validate_source_drain_snapshot(drain)
    await rig.engine.prepare_local_source_drain(drain.drain_transition, ME, deadline=rig.deadline())
    return drain


def test_drain_stops_revoking_partitions_and_abort_resumes_them() -> None:
    async def body(rig: Rig) -> None:
        drain = await drain_vnode_1(rig)
        assert rig.progress().paused_partitions == 2
        await fill(rig)
        await rig.until(lambda: rig.events() == 10, "vnode 0's events")
        await rig.settle()
        assert rig.progress().offsets == {0: 5, 4: 5, 1: 0, 5: 0}
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert dict(cut.vnodes[1].offsets) == {1: 0, 5: 0}  # still cut: it emits
        await rig.host.resolve(CheckpointAttempt.canonical(1), False, deadline=rig.deadline())
        assert drain.drain_transition is not None
        round_ = drain_id(drain.drain_transition)
        await rig.engine.resolve_local_source_drain(
            round_, SourceDrainOutcome.ABORT, deadline=rig.deadline()
        )
        await rig.until(lambda: rig.events() == 20, "vnode 1's events after the abort")

    run(body)


def test_drain_commit_keeps_revoking_partitions_paused_until_the_target_drops_them() -> None:
    async def body(rig: Rig) -> None:
        drain = await drain_vnode_1(rig)
        assert drain.drain_transition is not None
        await rig.engine.resolve_local_source_drain(
            drain_id(drain.drain_transition), SourceDrainOutcome.COMMIT, deadline=rig.deadline()
        )
        await fill(rig)
        await rig.until(lambda: rig.events() == 10, "vnode 0's events")
        await rig.settle()
        assert rig.events() == 10
        await rig.activate(snapshot(2, [1, 2, 2, 2]))
        assert rig.progress().paused_partitions == 0
        assert rig.processor.vnodes() == (0,)
        assert set(rig.progress().offsets) == {0, 4}

    run(body)


def test_drain_without_a_validated_target_pauses_every_owned_vnode() -> None:
    async def body(rig: Rig) -> None:
        await rig.until(lambda: rig.progress().restores == 2, "the first restore")
        drain = draining(V1, [1, 2, 2, 2])
        assert drain.drain_transition is not None
        await rig.engine.prepare_local_source_drain(
            drain.drain_transition, ME, deadline=rig.deadline()
        )
        assert rig.progress().paused_partitions == 4
        await fill(rig)
        await rig.settle()
        assert rig.events() == 0

    run(body)
