"""`RecordingEngine`: a `BaseEngine` that logs every command (not the pure reads) as
`(name, summary)`, for tests that check what the control plane asked of the engine. The log is
the tests' own: production engines keep none."""

from __future__ import annotations

from typing import Any

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.rules import fence_name, round_name, transition_name
from laminar_cluster.rebalance.interfaces import (
    Activation,
    Adoption,
    CheckpointResult,
    InitialState,
    RecoveryCut,
    SourceDrainOutcome,
)


def snapshot_name(snapshot: AssignmentSnapshot) -> str:
    kind = "draining" if snapshot.draining else "committed"
    return f"v{snapshot.assignment_version} {kind}"


def ref_name(ref: RecoveryCapsuleRef | InitialState | None) -> str:
    if ref is None:
        return "none"
    return "initial-state" if isinstance(ref, InitialState) else f"epoch {ref.epoch}"


class RecordingEngine(BaseEngine):
    """A `BaseEngine` whose commands are appended to `calls` as they start."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[tuple[str, str]] = []

    def call_count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    def _record(self, name: str, summary: str) -> None:
        self.calls.append((name, summary))

    def set_source_gate(self, closed: bool) -> None:
        self._record("set_source_gate", "closed" if closed else "open")
        super().set_source_gate(closed)

    def invalidate_shuffle_fence(self) -> None:
        self._record("invalidate_shuffle_fence", fence_name(self.installed_fence()))
        super().invalidate_shuffle_fence()

    def suspend_shuffle_fence(self) -> None:
        self._record("suspend_shuffle_fence", fence_name(self.installed_fence()))
        super().suspend_shuffle_fence()

    async def activate_authority(
        self,
        fence: CheckpointAssignmentFence,
        drain_transition: AssignmentDrainTransition | None,
        revision: int,
        *,
        deadline: float,
    ) -> Activation:
        self._record(
            "activate_authority",
            f"{fence_name(fence)} transition={transition_name(drain_transition)} "
            f"revision {revision}",
        )
        return await super().activate_authority(
            fence, drain_transition, revision, deadline=deadline
        )

    async def local_vnode_state_is_ready(
        self, fence: CheckpointAssignmentFence, *, deadline: float
    ) -> bool:
        self._record("local_vnode_state_is_ready", fence_name(fence))
        return await super().local_vnode_state_is_ready(fence, deadline=deadline)

    async def fault_for_recovery_assignment(self) -> None:
        self._record("fault_for_recovery_assignment", f"v{self.registry().version}")
        await super().fault_for_recovery_assignment()

    async def adopt_assignment(self, snapshot: AssignmentSnapshot, *, deadline: float) -> Adoption:
        self._record("adopt_assignment", snapshot_name(snapshot))
        return await super().adopt_assignment(snapshot, deadline=deadline)

    async def adopt_recovery_assignment(
        self,
        snapshot: AssignmentSnapshot,
        recovery_checkpoint: RecoveryCut | None,
        *,
        deadline: float,
    ) -> Adoption:
        self._record(
            "adopt_recovery_assignment",
            f"{snapshot_name(snapshot)} checkpoint={ref_name(recovery_checkpoint)}",
        )
        return await super().adopt_recovery_assignment(
            snapshot, recovery_checkpoint, deadline=deadline
        )

    def validate_source_drain_snapshot(self, draining: AssignmentSnapshot) -> None:
        self._record("validate_source_drain_snapshot", snapshot_name(draining))
        super().validate_source_drain_snapshot(draining)

    async def prepare_local_source_drain(
        self,
        transition: AssignmentDrainTransition,
        participant: FenceParticipant,
        *,
        deadline: float,
    ) -> None:
        round_ = round_name(drain_id(transition))
        self._record("prepare_local_source_drain", f"{round_} node {participant.node_id}")
        await super().prepare_local_source_drain(transition, participant, deadline=deadline)

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        self._record("resolve_local_source_drain", f"{round_name(drain)} {outcome.value}")
        await super().resolve_local_source_drain(drain, outcome, deadline=deadline)

    def enter_stopped_recovery(self) -> None:
        self._record("enter_stopped_recovery", f"v{self.registry().version}")
        super().enter_stopped_recovery()

    def leave_stopped_recovery(self) -> None:
        self._record("leave_stopped_recovery", f"v{self.registry().version}")
        super().leave_stopped_recovery()

    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        self._record("checkpoint_until", fence_name(self.installed_fence()))
        return await super().checkpoint_until(deadline=deadline)
