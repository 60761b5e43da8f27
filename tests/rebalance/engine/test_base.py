"""`BaseEngine`, the in-memory `RebalanceEngine` (spec_rebalance §6.2): adoption rules (§4.14,
§4.11 B), gates and the authority revision (§4.1, §4.12, §4.15), source-drain receipts (§2.8,
§4.6, §4.13), the cold-bootstrap rule of recovery adoption, stopped recovery (§4.18) and
checkpoint admission (§4.7). The handoff checkpointer is in test_handoff_checkpoint.py.

Node 1 is the local process throughout; boots are UUID(int=node*11) (tests.assignment).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    LaminarError,
    Refused,
)
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.base import (
    AdoptHook,
    BaseEngine,
    ShuffleState,
    VnodeStateReady,
)
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.interfaces import (
    CheckpointResult,
    EngineState,
    RebalanceEngine,
    RegistrySnapshot,
    SourceDrainOutcome,
)
from laminar_cluster.rebalance.refusals import Refusal
from tests.assignment.snapshot_support import draining, participant, snapshot
from tests.rebalance.refusal_support import raises_because

ME = participant(1)
V1 = snapshot(1, [1, 1, 2, 2])
V2 = snapshot(2, [1, 1, 1, 2])
CHECKPOINT = RecoveryCapsuleRef(epoch=4, checkpoint_id=4, sha256="4a" * 32, len=64)
COMMIT, ABORT = SourceDrainOutcome.COMMIT, SourceDrainOutcome.ABORT


def run(body: Callable[[SimulatedClock], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(SimulatedClock(seed=7))

    asyncio.run(main())


def engine_on(
    clock: SimulatedClock,
    *,
    checkpointer: Checkpointer | None = None,
    vnode_state_ready: VnodeStateReady | None = None,
    adopt_hook: AdoptHook | None = None,
) -> BaseEngine:
    return BaseEngine(
        clock=clock,
        participant=ME,
        checkpointer=checkpointer,
        vnode_state_ready=vnode_state_ready,
        adopt_hook=adopt_hook,
    )


def later(clock: SimulatedClock) -> float:
    return clock.monotonic() + 30.0


async def running(clock: SimulatedClock, current: AssignmentSnapshot = V1) -> BaseEngine:
    """An engine that adopted `current` and activated its fence."""
    engine = engine_on(clock)
    await engine.adopt_assignment(current, deadline=later(clock))
    activation = await engine.activate_authority(
        snapshot_fence(current), None, engine.authority_revision(), deadline=later(clock)
    )
    assert activation.installed
    return engine


def transition_of(drain: AssignmentSnapshot) -> AssignmentDrainTransition:
    assert drain.drain_transition is not None
    return drain.drain_transition


def test_control_engine_satisfies_the_engine_protocol() -> None:
    def typed(engine: RebalanceEngine) -> RebalanceEngine:
        return engine

    async def body(clock: SimulatedClock) -> None:
        engine = typed(engine_on(clock))
        assert engine.registry() == RegistrySnapshot(version=0, owners=())
        assert engine.state() is EngineState.CREATED
        assert engine.cluster_intake_fenced()
        assert not engine.installed_vnode_state()
        assert not engine.runtime_cancelled() and not engine.coordinated_recovery_in_progress()
        assert not engine.has_unapplied_vnode_transition()

    run(body)


# -- adoption ----------------------------------------------------------------------------------


def test_adopt_refuses_a_draining_snapshot() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        with pytest.raises(InvalidArgument, match="draining"):
            await engine.adopt_assignment(draining(V1, [1, 2, 2, 2]), deadline=later(clock))
        assert engine.registry().version == 1

    run(body)


def test_adopt_reports_newly_acquired_vnodes_and_ends_old_authority() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        first = await engine.adopt_assignment(V1, deadline=later(clock))
        assert (first.version, first.newly_acquired, first.recovery_required) == (1, (0, 1), False)
        assert engine.state() is EngineState.RUNNING and engine.installed_vnode_state()
        revision = engine.authority_revision()
        await engine.activate_authority(snapshot_fence(V1), None, revision, deadline=later(clock))
        assert not engine.cluster_intake_fenced()
        before = engine.authority_revision()
        second = await engine.adopt_assignment(V2, deadline=later(clock))
        assert (second.version, second.newly_acquired) == (2, (2,))
        assert engine.registry() == RegistrySnapshot(version=2, owners=(1, 1, 1, 2))
        # The v1 fence names the old version: intake closes until v2 is activated.
        assert engine.cluster_intake_fenced() and engine.installed_fence() is None
        assert engine.authority_revision() > before

    run(body)


def test_adopt_is_idempotent_at_or_below_the_registry() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        await engine.adopt_assignment(V2, deadline=later(clock))
        revision = engine.authority_revision()
        again = await engine.adopt_assignment(V2, deadline=later(clock))
        older = await engine.adopt_assignment(V1, deadline=later(clock))
        assert again.version == older.version == 2
        assert again.newly_acquired == older.newly_acquired == ()
        assert engine.authority_revision() == revision
        with raises_because(CorruptRecord, Refusal.OWNERS_DIFFER) as info:
            await engine.adopt_assignment(snapshot(2, [2, 1, 1, 2]), deadline=later(clock))
        assert info.value.key == snapshot_path(2)

    run(body)


def test_adopt_hook_runs_before_adoption() -> None:
    async def body(clock: SimulatedClock) -> None:
        blocked = [True]

        def hook(snap: AssignmentSnapshot) -> None:
            if blocked[0]:
                raise Refused(
                    f"v{snap.assignment_version}: shuffle still staged",
                    reason=Refusal.SHUFFLE_NOT_READY,
                )

        engine = engine_on(clock, adopt_hook=hook)
        with raises_because(Refused, Refusal.SHUFFLE_NOT_READY):
            await engine.adopt_assignment(V1, deadline=later(clock))
        assert engine.registry().version == 0 and engine.state() is EngineState.CREATED
        blocked[0] = False
        assert (await engine.adopt_assignment(V1, deadline=later(clock))).version == 1
        assert engine.call_count("adopt_assignment") == 2

    run(body)


def test_adopt_refuses_a_snapshot_certifying_another_boot_of_this_node() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        successor = snapshot(1, [1, 1, 2, 2], boots={1: 99})
        with raises_because(Refused, Refusal.ANOTHER_BOOT):
            await engine.adopt_assignment(successor, deadline=later(clock))
        assert engine.registry().version == 0

    run(body)


def test_faulted_engine_adopts_only_a_recovery_assignment() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        await engine.fault_for_recovery_assignment()
        assert engine.state() is EngineState.FAULTED and not engine.installed_vnode_state()
        with raises_because(Refused, Refusal.ENGINE_FAULTED):
            await engine.adopt_assignment(V2, deadline=later(clock))

    run(body)


def test_adoption_waits_for_the_adoption_lock_until_its_deadline() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        async with engine.adoption_lock, asyncio.TaskGroup() as group:
            task = group.create_task(
                _raises(engine.adopt_assignment(V1, deadline=clock.monotonic() + 1.0))
            )
            await clock.step(2.0)
        assert isinstance(task.result(), DeadlineExceeded)
        assert engine.registry().version == 0

    run(body)


# -- recovery adoption -------------------------------------------------------------------------


def test_recovery_adoption_requires_a_cold_bootstrap() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        with raises_because(Refused, Refusal.COLD_BOOTSTRAP_REQUIRED):
            await engine.adopt_recovery_assignment(V2, CHECKPOINT, deadline=later(clock))
        assert engine.registry().version == 1
        await engine.fault_for_recovery_assignment()
        adoption = await engine.adopt_recovery_assignment(V2, CHECKPOINT, deadline=later(clock))
        assert (adoption.version, adoption.newly_acquired) == (2, (2,))
        assert adoption.recovery_required
        assert engine.recovery_checkpoint() == CHECKPOINT
        assert engine.state() is EngineState.RUNNING and engine.installed_vnode_state()

    run(body)


def test_recovery_adoption_from_a_fresh_process_is_a_cold_bootstrap() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        adoption = await engine.adopt_recovery_assignment(V2, CHECKPOINT, deadline=later(clock))
        assert adoption.newly_acquired == (0, 1, 2)
        assert engine.recovery_checkpoint() == CHECKPOINT

    run(body)


def test_recovery_adoption_without_acquiring_needs_no_bootstrap() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock, V2)
        kept = await engine.adopt_recovery_assignment(
            snapshot(3, [1, 1, 2, 2]), CHECKPOINT, deadline=later(clock)
        )
        assert kept.newly_acquired == () and kept.recovery_required
        ownerless = await engine.adopt_recovery_assignment(
            snapshot(4, [2, 2, 2, 2]), None, deadline=later(clock)
        )
        assert ownerless.newly_acquired == () and not ownerless.recovery_required
        assert not engine.installed_vnode_state()

    run(body)


def test_recovery_adoption_of_owned_vnodes_needs_a_checkpoint() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        with pytest.raises(InvalidArgument, match="no recovery checkpoint"):
            await engine.adopt_recovery_assignment(V1, None, deadline=later(clock))

    run(body)


# -- gates and the authority revision ----------------------------------------------------------


def test_activation_refuses_when_the_revision_moved() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        await engine.adopt_assignment(V1, deadline=later(clock))
        read = engine.authority_revision()
        engine.set_source_gate(True)  # another path closed authority after `read`
        fence = snapshot_fence(V1)
        refused = await engine.activate_authority(fence, None, read, deadline=later(clock))
        assert not refused.installed and refused.revision == engine.authority_revision()
        assert engine.installed_fence() is None and engine.cluster_intake_fenced()
        installed = await engine.activate_authority(
            fence, None, refused.revision, deadline=later(clock)
        )
        assert installed.installed and installed.revision == refused.revision + 1
        assert engine.installed_fence() == fence
        assert engine.shuffle_state() is ShuffleState.ACTIVE
        assert not engine.cluster_intake_fenced()

    run(body)


def test_activation_requires_the_registry_fence_and_a_matching_transition() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = engine_on(clock)
        await engine.adopt_assignment(V1, deadline=later(clock))
        revision = engine.authority_revision()
        with raises_because(Refused, Refusal.FENCE_NOT_LOCAL_REGISTRY):
            await engine.activate_authority(
                snapshot_fence(V2), None, revision, deadline=later(clock)
            )
        foreign = transition_of(draining(V2, [1, 2, 2, 2]))
        with raises_because(Refused, Refusal.TRANSITION_NOT_AT_FENCE):
            await engine.activate_authority(
                snapshot_fence(V1), foreign, revision, deadline=later(clock)
            )
        own = transition_of(draining(V1, [1, 2, 2, 2]))
        activation = await engine.activate_authority(
            snapshot_fence(V1), own, revision, deadline=later(clock)
        )
        assert activation.installed and engine.installed_drain_transition() == own

    run(body)


def test_gate_closures_bump_the_revision_and_reopening_does_not() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        fence = engine.installed_fence()
        revision = engine.authority_revision()
        engine.set_source_gate(True)
        assert engine.cluster_intake_fenced() and engine.authority_revision() == revision + 1
        engine.set_source_gate(False)
        assert not engine.cluster_intake_fenced() and engine.authority_revision() == revision + 1
        engine.suspend_shuffle_fence()
        assert engine.shuffle_state() is ShuffleState.SUSPENDED
        assert engine.installed_fence() == fence  # kept, so the same version can resume
        assert engine.authority_revision() == revision + 2
        engine.invalidate_shuffle_fence()
        assert engine.shuffle_state() is ShuffleState.INVALIDATED
        assert engine.installed_fence() is None and engine.authority_revision() == revision + 3

    run(body)


def test_activation_keeps_intake_fenced_during_stopped_recovery() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        engine.enter_stopped_recovery()
        activation = await engine.activate_authority(
            snapshot_fence(V1), None, engine.authority_revision(), deadline=later(clock)
        )
        assert activation.installed and engine.cluster_intake_fenced()

    run(body)


def test_vnode_state_readiness_follows_the_registry_and_the_hook() -> None:
    async def body(clock: SimulatedClock) -> None:
        ready = [False]

        def hook(fence: CheckpointAssignmentFence) -> bool:
            return ready[0] and fence.assignment_version == 1

        engine = engine_on(clock, vnode_state_ready=hook)
        await engine.adopt_assignment(V1, deadline=later(clock))
        fence = snapshot_fence(V1)
        assert not await engine.local_vnode_state_is_ready(fence, deadline=later(clock))
        ready[0] = True
        assert await engine.local_vnode_state_is_ready(fence, deadline=later(clock))
        # A fence the registry does not run is never ready.
        other = snapshot_fence(V2)
        assert not await engine.local_vnode_state_is_ready(other, deadline=later(clock))
        default = engine_on(clock)
        await default.adopt_assignment(V1, deadline=later(clock))
        assert await default.local_vnode_state_is_ready(fence, deadline=later(clock))

    run(body)


# -- source drains -----------------------------------------------------------------------------


def test_prepare_is_idempotent_per_transition_and_resolves_once() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        transition = transition_of(draining(V1, [1, 2, 2, 2]))
        await engine.prepare_local_source_drain(transition, ME, deadline=later(clock))
        await engine.prepare_local_source_drain(transition, ME, deadline=later(clock))
        assert engine.call_count("prepare_local_source_drain") == 2
        round_ = drain_id(transition)
        assert engine.drains.open_round() == round_
        receipt = engine.drains.receipt(round_)
        assert receipt is not None and receipt.prepared and receipt.outcome is None
        assert not engine.owned_source_drain_resolved(round_, COMMIT)
        await engine.resolve_local_source_drain(round_, COMMIT, deadline=later(clock))
        await engine.resolve_local_source_drain(round_, COMMIT, deadline=later(clock))
        assert engine.owned_source_drain_resolved(round_, COMMIT)
        assert not engine.owned_source_drain_resolved(round_, ABORT)
        assert engine.drains.open_round() is None
        with raises_because(Refused, Refusal.DRAIN_RESOLVED_OTHERWISE):
            await engine.resolve_local_source_drain(round_, ABORT, deadline=later(clock))
        assert engine.owned_source_drain_resolved(round_, COMMIT)

    run(body)


def test_one_open_drain_round_at_a_time() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        first = transition_of(draining(V1, [1, 2, 2, 2]))
        second = transition_of(draining(V1, [2, 2, 2, 1]))
        await engine.prepare_local_source_drain(first, ME, deadline=later(clock))
        with raises_because(Refused, Refusal.OTHER_DRAIN_OPEN):
            await engine.prepare_local_source_drain(second, ME, deadline=later(clock))
        assert engine.drains.open_round() == drain_id(first)  # the sources stay on 1->2
        with raises_because(Refused, Refusal.OTHER_DRAIN_OPEN):
            await engine.resolve_local_source_drain(drain_id(second), ABORT, deadline=later(clock))
        assert engine.drains.open_round() == drain_id(first)
        assert not engine.owned_source_drain_resolved(drain_id(second), ABORT)

    run(body)


def test_prepare_requires_this_predecessor_process_running_the_predecessor() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        transition = transition_of(draining(V1, [1, 2, 2, 2]))
        with pytest.raises(InvalidArgument, match="is not this process"):
            await engine.prepare_local_source_drain(
                transition, participant(2), deadline=later(clock)
            )
        joiner = BaseEngine(clock=clock, participant=participant(3))
        with pytest.raises(InvalidArgument, match="not a predecessor participant"):
            await joiner.prepare_local_source_drain(
                transition, participant(3), deadline=later(clock)
            )
        lagging = engine_on(clock)
        with raises_because(Refused, Refusal.NOT_RUNNING_PREDECESSOR):
            await lagging.prepare_local_source_drain(transition, ME, deadline=later(clock))

    run(body)


def test_resolution_without_preparation_is_accepted() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        round_ = drain_id(transition_of(draining(V1, [1, 2, 2, 2])))
        await engine.resolve_local_source_drain(round_, ABORT, deadline=later(clock))
        assert engine.owned_source_drain_resolved(round_, ABORT)
        receipt = engine.drains.receipt(round_)
        assert receipt is not None and not receipt.prepared

    run(body)


def test_validate_source_drain_snapshot() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        engine.validate_source_drain_snapshot(draining(V1, [1, 2, 2, 2]))
        with pytest.raises(InvalidArgument, match="not draining"):
            engine.validate_source_drain_snapshot(V2)
        with pytest.raises(InvalidArgument, match="vnodes"):
            wide = snapshot(1, [1, 2])
            engine.validate_source_drain_snapshot(draining(wide, [1, 1]))
        # A target-only joiner (empty registry) validates the shape only.
        engine_on(clock).validate_source_drain_snapshot(draining(V1, [1, 2, 2, 2]))

    run(body)


def test_stopped_recovery_keeps_the_stopped_terminal_round() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        transition = transition_of(draining(V1, [1, 2, 2, 2]))
        await engine.prepare_local_source_drain(transition, ME, deadline=later(clock))
        engine.enter_stopped_recovery()
        assert engine.state() is EngineState.CREATED
        assert engine.runtime_cancelled() and engine.coordinated_recovery_in_progress()
        assert engine.cluster_intake_fenced() and engine.installed_fence() is None
        round_ = drain_id(transition)
        assert engine.stopped_terminal_round(transition.predecessor) == round_
        assert engine.stopped_terminal_round(snapshot_fence(V2)) is None
        # The replacement generation re-applies the durable verdict before Release (§4.18).
        await engine.resolve_local_source_drain(round_, ABORT, deadline=later(clock))
        assert engine.owned_source_drain_resolved(round_, ABORT)
        engine.leave_stopped_recovery()
        assert engine.state() is EngineState.RUNNING
        assert not engine.runtime_cancelled() and not engine.coordinated_recovery_in_progress()
        assert engine.stopped_terminal_round(transition.predecessor) is None

    run(body)


# -- checkpoints -------------------------------------------------------------------------------


class RecordingCheckpointer:
    def __init__(self, error: LaminarError | None = None) -> None:
        self.seen: list[tuple[CheckpointAssignmentFence, AssignmentDrainTransition | None]] = []
        self.error = error

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        self.seen.append((fence, transition))
        if self.error is not None:
            raise self.error
        return CheckpointResult(success=True, epoch=9, checkpoint_id=9)


def test_checkpoint_runs_under_the_installed_fence_and_transition() -> None:
    async def body(clock: SimulatedClock) -> None:
        checkpointer = RecordingCheckpointer()
        engine = engine_on(clock, checkpointer=checkpointer)
        await engine.adopt_assignment(V1, deadline=later(clock))
        transition = transition_of(draining(V1, [1, 2, 2, 2]))
        await engine.activate_authority(
            snapshot_fence(V1), transition, engine.authority_revision(), deadline=later(clock)
        )
        result = await engine.checkpoint_until(deadline=later(clock))
        assert result == CheckpointResult(success=True, epoch=9, checkpoint_id=9)
        assert checkpointer.seen == [(snapshot_fence(V1), transition)]

    run(body)


def test_checkpoint_fails_without_fence_checkpointer_or_live_authority() -> None:
    async def body(clock: SimulatedClock) -> None:
        checkpointer = RecordingCheckpointer()
        engine = engine_on(clock, checkpointer=checkpointer)
        result = await engine.checkpoint_until(deadline=later(clock))
        assert not result.success and isinstance(result.error, Refused)
        assert result.error.reason is Refusal.NO_FENCE_INSTALLED
        await engine.adopt_assignment(V1, deadline=later(clock))
        revision = engine.authority_revision()
        await engine.activate_authority(snapshot_fence(V1), None, revision, deadline=later(clock))
        engine.suspend_shuffle_fence()
        suspended = await engine.checkpoint_until(deadline=later(clock))
        assert not suspended.success and isinstance(suspended.error, Refused)
        assert suspended.error.reason is Refusal.AUTHORITY_SUSPENDED
        assert checkpointer.seen == []
        bare = await running(clock)
        missing = await bare.checkpoint_until(deadline=later(clock))
        assert not missing.success and isinstance(missing.error, InvalidArgument)

    run(body)


def test_checkpoint_errors_become_failed_results() -> None:
    async def body(clock: SimulatedClock) -> None:
        checkpointer = RecordingCheckpointer(DeadlineExceeded("late"))
        engine = engine_on(clock, checkpointer=checkpointer)
        await engine.adopt_assignment(V1, deadline=later(clock))
        revision = engine.authority_revision()
        await engine.activate_authority(snapshot_fence(V1), None, revision, deadline=later(clock))
        result = await engine.checkpoint_until(deadline=later(clock))
        # The checkpointer's error, kind kept.
        assert not result.success and isinstance(result.error, DeadlineExceeded)
        assert len(checkpointer.seen) == 1
        past = await engine.checkpoint_until(deadline=clock.monotonic())
        # The admission deadline: the checkpointer never ran.
        assert not past.success and isinstance(past.error, DeadlineExceeded)
        assert len(checkpointer.seen) == 1

    run(body)


def test_calls_are_logged_in_order() -> None:
    async def body(clock: SimulatedClock) -> None:
        engine = await running(clock)
        engine.set_source_gate(True)
        assert [name for name, _ in engine.calls] == [
            "adopt_assignment",
            "activate_authority",
            "set_source_gate",
        ]
        assert engine.calls[0] == ("adopt_assignment", "v1 committed")
        assert engine.calls[2] == ("set_source_gate", "closed")

    run(body)


async def _raises(awaitable: Awaitable[object]) -> BaseException | None:
    try:
        await awaitable
    except LaminarError as error:
        return error
    return None
