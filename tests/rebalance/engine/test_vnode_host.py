"""`VnodeHost` (rebalance/engine/vnode_host.py, cuts.py): what `BaseEngine` does for any
`DataPlane`, seen through a plane that only records what it is told. Ownership and restores
(DC §3.4: newly owned vnodes restore; a restore the ownership moved past is discarded), drain
pauses (RB §2.8), cuts held until their outcome (DC §1.7), and the engine without a plane.

Node 1 (boot UUID(int=11)) is the local process; V1 gives it vnodes 0 and 1 of 4.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import CheckpointAttempt, RecoveryCapsuleRef
from laminar_cluster.clock import RealClock
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.cuts import HostTimings
from laminar_cluster.rebalance.engine.data_plane import Cut, DataPlane, Intake, VnodeCut
from laminar_cluster.rebalance.engine.restores import (
    HandoffRestore,
    RecoveryRestore,
    RestoredCuts,
    RestoreSource,
)
from laminar_cluster.rebalance.engine.vnode_host import VnodeHost
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from tests.assignment.snapshot_support import draining, participant, proof, snapshot

ME = participant(1)
V1 = snapshot(1, [1, 1, 2, 2])
REF = RecoveryCapsuleRef(epoch=3, checkpoint_id=3, sha256="3a" * 32, len=10)
TIMINGS = HostTimings(idle_s=0.002, retry_s=0.01, restore_timeout_s=5.0)


@dataclass
class RecordingPlane:
    """A `DataPlane` that records every call; `capture` cuts the running vnodes empty."""

    calls: list[tuple[str, object]] = field(default_factory=list)
    running: dict[int, VnodeCut | None] = field(default_factory=dict)
    refuse: frozenset[int] = frozenset()  # vnodes whose restore raises CorruptRecord
    extra_vnode: bool = False  # capture one vnode too many (a plane bug)

    def restore(self, vnode: int, cut: VnodeCut | None, *, vnode_count: int) -> None:
        if vnode in self.refuse:
            raise CorruptRecord(f"vnode {vnode}: refused")
        self.calls.append(("restore", (vnode, vnode_count)))
        self.running[vnode] = cut

    def drop(self, vnode: int) -> None:
        self.calls.append(("drop", vnode))
        self.running.pop(vnode, None)

    def pause(self, vnodes: frozenset[int]) -> None:
        self.calls.append(("pause", vnodes))

    def capture(self, vnodes: tuple[int, ...]) -> Callable[[], Cut]:
        self.calls.append(("capture", vnodes))
        cut_of = (*vnodes, 99) if self.extra_vnode else vnodes
        return lambda: Cut({v: VnodeCut(state=None, offsets={}) for v in cut_of}, b"")

    def resolve(self, vnodes: tuple[int, ...], committed: bool) -> None:
        self.calls.append(("resolve", (vnodes, committed)))

    async def run(self, intake: Intake, shutdown: asyncio.Event) -> None:
        await shutdown.wait()

    def called(self, name: str) -> list[object]:
        return [argument for called, argument in self.calls if called == name]


@dataclass
class GatedRestorer:
    """Empty cuts for every vnode; blocks while `gate` is set and not released."""

    calls: list[tuple[RestoreSource, tuple[int, ...]]] = field(default_factory=list)
    gate: asyncio.Event | None = None

    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        self.calls.append((source, vnodes))
        if self.gate is not None:
            await self.gate.wait()
        return dict.fromkeys(vnodes)


@dataclass
class Rig:
    clock: RealClock
    engine: BaseEngine
    host: VnodeHost
    plane: RecordingPlane
    restorer: GatedRestorer

    def deadline(self) -> float:
        return self.clock.monotonic() + 5.0

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        end = self.deadline()
        while not predicate():
            assert self.clock.monotonic() < end, f"timed out waiting for {what}"
            await self.clock.sleep(0.002)

    async def activate(self, current: AssignmentSnapshot = V1) -> None:
        engine = self.engine
        await engine.adopt_assignment(current, deadline=self.deadline())
        revision = engine.authority_revision()
        fence = snapshot_fence(current)
        assert await engine.activate_authority(fence, None, revision, deadline=self.deadline())
        await self.until(self.host.ready, "the restores")

    def prepare(self, epoch: int) -> CheckpointPrepare:
        return CheckpointPrepare(
            version=1,
            attempt=CheckpointAttempt.canonical(epoch),
            fence=snapshot_fence(V1),
            leader_proof=proof(),
            drain_transition=None,
        )


def run(body: Callable[[Rig], Awaitable[None]], *, plane: RecordingPlane | None = None) -> None:
    async def main() -> None:
        clock = RealClock()
        recording = plane or RecordingPlane()
        restorer = GatedRestorer()
        engine = BaseEngine(
            clock=clock,
            participant=ME,
            data_plane=recording,
            restorer=restorer,
            timings=TIMINGS,
        )
        assert engine.host is not None
        rig = Rig(clock, engine, engine.host, recording, restorer)
        shutdown = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(engine.host.run(shutdown))
            try:
                await body(rig)
            finally:
                shutdown.set()

    asyncio.run(main())


def test_a_recording_plane_is_a_data_plane() -> None:
    def typed(plane: DataPlane) -> DataPlane:
        return plane

    assert typed(RecordingPlane()) is not None


def test_a_data_plane_needs_a_restorer() -> None:
    with pytest.raises(InvalidArgument, match="restorer"):
        BaseEngine(clock=RealClock(), participant=ME, data_plane=RecordingPlane())


def test_an_engine_without_a_data_plane_has_no_host_and_is_ready() -> None:
    async def main() -> None:
        clock = RealClock()
        engine = BaseEngine(clock=clock, participant=ME)
        await engine.adopt_assignment(V1, deadline=clock.monotonic() + 5.0)
        assert engine.host is None
        assert await engine.local_vnode_state_is_ready(
            snapshot_fence(V1), deadline=clock.monotonic() + 5.0
        )

    asyncio.run(main())


# -- ownership ---------------------------------------------------------------------------------


def test_adoption_restores_newly_owned_vnodes_from_the_latest_checkpoint() -> None:
    async def body(rig: Rig) -> None:
        gate = rig.restorer.gate = asyncio.Event()
        await rig.engine.adopt_assignment(V1, deadline=rig.deadline())
        assert set(rig.host.restoring) == {0, 1} and not rig.host.ready()
        ready = await rig.engine.local_vnode_state_is_ready(
            snapshot_fence(V1), deadline=rig.deadline()
        )
        assert not ready
        gate.set()
        await rig.until(rig.host.ready, "the restores")
        assert rig.restorer.calls == [(HandoffRestore(), (0, 1))]
        assert rig.plane.called("restore") == [(0, 4), (1, 4)]
        assert rig.host.progress().restores == 2

    run(body)


def test_adoption_drops_vnodes_no_longer_owned() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        await rig.activate(snapshot(2, [1, 2, 1, 2]))  # vnode 1 leaves, vnode 2 arrives
        assert 1 in rig.plane.called("drop") and set(rig.plane.running) == {0, 2}
        assert rig.restorer.calls[-1] == (HandoffRestore(), (2,))
        assert rig.host.owned == {0, 2}

    run(body)


def test_a_restore_the_ownership_moved_past_is_discarded() -> None:
    async def body(rig: Rig) -> None:
        gate = rig.restorer.gate = asyncio.Event()
        await rig.engine.adopt_assignment(V1, deadline=rig.deadline())
        await rig.until(lambda: len(rig.restorer.calls) == 1, "the handoff restore to start")
        stale = rig.host.restoring[0]
        await rig.engine.fault_for_recovery_assignment()
        recovered = snapshot(2, [1, 1, 2, 2])
        await rig.engine.adopt_recovery_assignment(recovered, REF, deadline=rig.deadline())
        assert rig.host.restoring[0].source == RecoveryRestore(REF)
        assert rig.host.restoring[0] != stale
        gate.set()
        await rig.until(rig.host.ready, "the recovery restore")
        assert rig.restorer.calls[-1] == (RecoveryRestore(REF), (0, 1))
        assert rig.plane.called("restore") == [(0, 4), (1, 4)]  # the stale cuts never landed

    run(body)


def test_a_cut_the_plane_refuses_keeps_its_vnode_restoring_and_is_retried() -> None:
    async def body(rig: Rig) -> None:
        await rig.engine.adopt_assignment(V1, deadline=rig.deadline())
        await rig.until(lambda: rig.host.progress().errors >= 1, "the refused restore")
        assert set(rig.host.restoring) == {1}
        assert rig.host.progress().last_error == "vnode 1: refused"
        rig.plane.refuse = frozenset()
        await rig.until(rig.host.ready, "the retried restore")
        assert len(rig.restorer.calls) >= 2

    run(body, plane=RecordingPlane(refuse=frozenset({1})))


def test_an_empty_cut_with_offsets_is_corrupt() -> None:
    async def body(rig: Rig) -> None:
        bad = VnodeCut(state=None, offsets={0: 3})

        async def corrupt(
            source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
        ) -> RestoredCuts:
            return dict.fromkeys(vnodes, bad)

        rig.host.restorer = corrupt
        await rig.engine.adopt_assignment(V1, deadline=rig.deadline())
        await rig.until(lambda: rig.host.progress().errors >= 1, "the corrupt restore")
        assert "no state but offsets above 0" in str(rig.host.progress().last_error)
        assert rig.plane.called("restore") == []

    run(body)


# -- drain pauses ------------------------------------------------------------------------------


async def prepare_drain(rig: Rig, *, validated: bool = True) -> AssignmentSnapshot:
    """Prepare the drain of V1 to [1, 2, 2, 2]: vnode 1 leaves node 1."""
    drain = draining(V1, [1, 2, 2, 2])
    assert drain.drain_transition is not None
    if validated:
        rig.engine.validate_source_drain_snapshot(drain)
    await rig.engine.prepare_local_source_drain(drain.drain_transition, ME, deadline=rig.deadline())
    return drain


def test_a_prepared_drain_pauses_the_revoking_vnodes_and_abort_resumes_them() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        drain = await prepare_drain(rig)
        assert rig.host.paused == {1} and rig.plane.called("pause") == [frozenset({1})]
        assert drain.drain_transition is not None
        await rig.engine.resolve_local_source_drain(
            drain_id(drain.drain_transition), SourceDrainOutcome.ABORT, deadline=rig.deadline()
        )
        assert rig.host.paused == frozenset()
        assert rig.plane.called("pause")[-1] == frozenset()

    run(body)


def test_after_commit_revoking_vnodes_stay_paused_until_the_target_drops_them() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        drain = await prepare_drain(rig)
        assert drain.drain_transition is not None
        await rig.engine.resolve_local_source_drain(
            drain_id(drain.drain_transition), SourceDrainOutcome.COMMIT, deadline=rig.deadline()
        )
        assert rig.host.paused == {1}
        await rig.activate(snapshot(2, [1, 2, 2, 2]))
        assert rig.host.paused == frozenset() and rig.host.owned == {0}
        assert 1 in rig.plane.called("drop")

    run(body)


def test_a_drain_without_a_validated_target_pauses_every_owned_vnode() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        await prepare_drain(rig, validated=False)
        assert rig.host.paused == {0, 1}

    run(body)


# -- cuts --------------------------------------------------------------------------------------


def test_a_cut_is_held_until_its_outcome_and_the_same_attempt_gets_the_same_cut() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        cut = await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert set(cut.vnodes) == {0, 1} and rig.plane.called("capture") == [(0, 1)]
        assert await rig.host.cut(rig.prepare(1), deadline=rig.deadline()) is cut
        assert rig.host.progress().holding_cut == CheckpointAttempt.canonical(1)
        await rig.host.resolve(CheckpointAttempt.canonical(1), True, deadline=rig.deadline())
        assert rig.plane.called("resolve") == [((0, 1), True)]
        assert (rig.host.progress().cuts, rig.host.progress().commits) == (1, 1)

    run(body)


def test_a_fault_releases_a_held_cut_and_its_output_stays_pending() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        await rig.engine.fault_for_recovery_assignment()
        assert rig.plane.called("resolve") == [((0, 1), False)]
        assert rig.host.progress().holding_cut is None and rig.host.owned == frozenset()
        await rig.host.resolve(CheckpointAttempt.canonical(1), True, deadline=rig.deadline())
        assert rig.plane.called("resolve") == [((0, 1), False)]  # not held: a no-op

    run(body)


def test_a_plane_cutting_other_vnodes_is_refused_and_its_output_stays_pending() -> None:
    async def body(rig: Rig) -> None:
        await rig.activate()
        with pytest.raises(LaminarError, match="not the owned"):
            await rig.host.cut(rig.prepare(1), deadline=rig.deadline())
        assert rig.plane.called("resolve") == [((0, 1), False)]
        assert rig.host.progress().holding_cut is None

    run(body, plane=RecordingPlane(extra_vnode=True))
