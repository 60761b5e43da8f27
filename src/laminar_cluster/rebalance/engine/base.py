"""`BaseEngine`: the `RebalanceEngine` of a process that runs no user processing
(spec_rebalance §6.2; gates §4.15, adoption §4.11 B and §4.14, source drains §2.8 and §4.6,
checkpoints §4.7).

It is the reference the control plane is tested with, and the base the runtime extends: every
piece of state §6.2 names is kept here, in memory, with the rules the control plane relies on.

* Authority revision: bumped by every path that closes or (re)installs authority: closing the
  source gate, suspending or invalidating the shuffle fence, activation, adopting a new
  version, faulting, entering stopped recovery. Reopening the gate alone does not bump it.
* Adopting a new version ends the authority of the old one: intake closes and the installed
  fence and drain transition (which name the old version) are dropped, until the watcher
  activates the new fence (§4.12).
* `adopt_assignment`, `adopt_recovery_assignment` and `activate_authority` take
  `adoption_lock` themselves (bounded by the deadline): callers must not hold it. The checks
  the control plane makes under the lock (`local_vnode_state_is_ready`,
  `has_unapplied_vnode_transition`, `validate_source_drain_snapshot`) never take it.
* `checkpoint_until` admits under `adoption_lock` (the admission linearization point, §4.1),
  then runs the injected `Checkpointer` holding `rotation_lock` shared, like any compute.

Test hooks are constructor arguments: `checkpointer`, `vnode_state_ready(fence)` (default:
ready), `adopt_hook(snapshot)` (runs before an adoption applies; may raise Refused with reason
`Refusal.SHUFFLE_NOT_READY`).
Every command (not the pure reads) is appended to `calls` as `(name, summary)`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import InvalidArgument, LaminarError, Refused, restated
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.drains import SourceDrainLedger
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.engine.rules import (
    acquired_vnodes,
    check_activation,
    fence_name,
    ref_name,
    registry_runs,
    require_committed,
    require_draining,
    round_name,
    snapshot_name,
    transition_name,
    unchanged_adoption,
)
from laminar_cluster.rebalance.interfaces import (
    Activation,
    Adoption,
    CheckpointResult,
    EngineState,
    RecoveryCut,
    RegistrySnapshot,
    SourceDrainOutcome,
)
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation_lock import RotationLock

VnodeStateReady = Callable[[CheckpointAssignmentFence], bool]
AdoptHook = Callable[[AssignmentSnapshot], None]


class ShuffleState(enum.Enum):
    NONE = "none"  # never installed
    ACTIVE = "active"
    SUSPENDED = "suspended"  # paused; the certificate is kept so the version can resume
    INVALIDATED = "invalidated"  # the certificate was dropped


class BaseEngine:
    """An in-memory `RebalanceEngine` for one process `participant` (node id and boot)."""

    def __init__(
        self,
        *,
        clock: Clock,
        participant: FenceParticipant,
        checkpointer: Checkpointer | None = None,
        vnode_state_ready: VnodeStateReady | None = None,
        adopt_hook: AdoptHook | None = None,
    ) -> None:
        self.clock = clock
        self.participant = participant
        self.checkpointer = checkpointer
        self.vnode_state_ready = vnode_state_ready
        self.adopt_hook = adopt_hook
        self.adoption_lock = asyncio.Lock()
        self.rotation_lock = RotationLock()
        self.calls: list[tuple[str, str]] = []
        self.drains = SourceDrainLedger()
        self._registry = RegistrySnapshot(version=0, owners=())
        self._revision = 0
        self._state = EngineState.CREATED
        self._source_gate_closed = True
        self._shuffle = ShuffleState.NONE
        self._fence: CheckpointAssignmentFence | None = None
        self._transition: AssignmentDrainTransition | None = None
        self._installed_vnode_state = False
        self._unapplied_vnode_transition = False
        self._recovery_checkpoint: RecoveryCut | None = None
        self._runtime_cancelled = False
        self._coordinated_recovery = False

    # -- state ---------------------------------------------------------------------------------
    def registry(self) -> RegistrySnapshot:
        return self._registry

    def authority_revision(self) -> int:
        return self._revision

    def state(self) -> EngineState:
        return self._state

    def runtime_cancelled(self) -> bool:
        return self._runtime_cancelled

    def coordinated_recovery_in_progress(self) -> bool:
        return self._coordinated_recovery

    def installed_fence(self) -> CheckpointAssignmentFence | None:
        return self._fence

    def installed_drain_transition(self) -> AssignmentDrainTransition | None:
        return self._transition

    def shuffle_state(self) -> ShuffleState:
        return self._shuffle

    def recovery_checkpoint(self) -> RecoveryCut | None:
        """The checkpoint (or the initial state) the last recovery adoption restored from."""
        return self._recovery_checkpoint

    def call_count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    # -- authority gates -----------------------------------------------------------------------
    def set_source_gate(self, closed: bool) -> None:
        self._record("set_source_gate", "closed" if closed else "open")
        self._source_gate_closed = closed
        if closed:
            self._revision += 1

    def cluster_intake_fenced(self) -> bool:
        return self._source_gate_closed

    def invalidate_shuffle_fence(self) -> None:
        self._record("invalidate_shuffle_fence", fence_name(self._fence))
        self._drop_fence()

    def suspend_shuffle_fence(self) -> None:
        self._record("suspend_shuffle_fence", fence_name(self._fence))
        if self._fence is not None:
            self._shuffle = ShuffleState.SUSPENDED
        self._revision += 1

    async def activate_authority(
        self,
        fence: CheckpointAssignmentFence,
        drain_transition: AssignmentDrainTransition | None,
        revision: int,
        *,
        deadline: float,
    ) -> Activation:
        """Install `fence` and `drain_transition`, reopen intake unless the engine is faulted,
        stopped or recovering, and return the bumped revision; installed=False when the
        revision moved since `revision`. A fence that does not certify the local registry (or
        a transition that does not start at it) is Refused (`rules.check_activation`)."""
        self._record(
            "activate_authority",
            f"{fence_name(fence)} transition={transition_name(drain_transition)} "
            f"revision {revision}",
        )
        async with (
            within_deadline(self.clock, deadline, "authority activation"),
            self.adoption_lock,
        ):
            if revision != self._revision:
                return Activation(installed=False, revision=self._revision)
            check_activation(self._registry, self.participant, fence, drain_transition)
            self._fence, self._transition = fence, drain_transition
            self._shuffle = ShuffleState.ACTIVE
            self._source_gate_closed = not self._intake_allowed()
            self._revision += 1
            return Activation(installed=True, revision=self._revision)

    # -- vnode state ---------------------------------------------------------------------------
    def has_unapplied_vnode_transition(self) -> bool:
        return self._unapplied_vnode_transition

    def set_unapplied_vnode_transition(self, pending: bool) -> None:
        """Test knob: pretend a local vnode transition is (not) still being applied."""
        self._record("set_unapplied_vnode_transition", str(pending))
        self._unapplied_vnode_transition = pending

    async def local_vnode_state_is_ready(
        self, fence: CheckpointAssignmentFence, *, deadline: float
    ) -> bool:
        """Ready when the registry runs exactly `fence`'s owner map and the hook agrees."""
        self._record("local_vnode_state_is_ready", fence_name(fence))
        async with within_deadline(self.clock, deadline, "local vnode state readiness"):
            if not registry_runs(self._registry, fence):
                return False
            return self.vnode_state_ready is None or self.vnode_state_ready(fence)

    def installed_vnode_state(self) -> bool:
        return self._installed_vnode_state

    async def fault_for_recovery_assignment(self) -> None:
        """Drop vnode state and authority; FAULTED until a recovery adoption restores cold."""
        self._record("fault_for_recovery_assignment", f"v{self._registry.version}")
        self._installed_vnode_state = False
        self._state = EngineState.FAULTED
        self._source_gate_closed = True
        self._drop_fence()

    # -- adoption ------------------------------------------------------------------------------
    async def adopt_assignment(self, snapshot: AssignmentSnapshot, *, deadline: float) -> Adoption:
        """Run committed `snapshot` (§6.2): InvalidArgument for a draining or malformed one, a
        no-op for versions at or below the registry's, Refused on a faulted engine
        (ENGINE_FAULTED) or a snapshot certifying another boot of this node (ANOTHER_BOOT)."""
        self._record("adopt_assignment", snapshot_name(snapshot))
        require_committed(snapshot)
        async with within_deadline(self.clock, deadline, "assignment adoption"), self.adoption_lock:
            unchanged = unchanged_adoption(self._registry, snapshot)
            if unchanged is not None:
                return unchanged
            if self._state is EngineState.FAULTED:
                raise Refused(
                    f"assignment {snapshot.assignment_version}: a faulted engine adopts only "
                    "a recovery assignment",
                    reason=Refusal.ENGINE_FAULTED,
                )
            acquired = self._acquired(snapshot)
            self._apply(snapshot)
            return Adoption(snapshot.assignment_version, acquired, recovery_required=False)

    async def adopt_recovery_assignment(
        self,
        snapshot: AssignmentSnapshot,
        recovery_checkpoint: RecoveryCut | None,
        *,
        deadline: float,
    ) -> Adoption:
        """Run a recovery generation, restoring owned vnodes cold from `recovery_checkpoint`
        (INITIAL_STATE: they start empty).
        Acquiring vnodes needs a cold bootstrap (CREATED or FAULTED, no vnode state).
        `recovery_required` is True when this process owns vnodes in it: a participant
        finishes its restore through the coordinated-recovery round (§4.11 B)."""
        self._record(
            "adopt_recovery_assignment",
            f"{snapshot_name(snapshot)} checkpoint={ref_name(recovery_checkpoint)}",
        )
        require_committed(snapshot)
        async with (
            within_deadline(self.clock, deadline, "recovery assignment adoption"),
            self.adoption_lock,
        ):
            unchanged = unchanged_adoption(self._registry, snapshot)
            if unchanged is not None:
                return unchanged
            acquired = self._acquired(snapshot)
            owns = self.participant.node_id in snapshot.owners
            if owns and recovery_checkpoint is None:
                raise InvalidArgument(
                    f"recovery assignment {snapshot.assignment_version} gives node "
                    f"{self.participant.node_id} vnodes but names no recovery checkpoint"
                )
            cold = self._state in (EngineState.CREATED, EngineState.FAULTED)
            if acquired and not (cold and not self._installed_vnode_state):
                raise Refused(
                    "recovery adoption requires a cold bootstrap",
                    reason=Refusal.COLD_BOOTSTRAP_REQUIRED,
                )
            self._apply(snapshot)
            self._recovery_checkpoint = recovery_checkpoint
            return Adoption(snapshot.assignment_version, acquired, recovery_required=owns)

    # -- source drains -------------------------------------------------------------------------
    def validate_source_drain_snapshot(self, draining: AssignmentSnapshot) -> None:
        """A canonical draining snapshot with the registry's vnode count (InvalidArgument)."""
        self._record("validate_source_drain_snapshot", snapshot_name(draining))
        require_draining(self._registry, draining)

    async def prepare_local_source_drain(
        self,
        transition: AssignmentDrainTransition,
        participant: FenceParticipant,
        *,
        deadline: float,
    ) -> None:
        """Stop local sources at one cut for `transition`; idempotent per transition."""
        round_ = drain_id(transition)
        self._record(
            "prepare_local_source_drain", f"{round_name(round_)} node {participant.node_id}"
        )
        async with within_deadline(self.clock, deadline, "local source drain prepare"):
            if participant != self.participant:
                raise InvalidArgument(f"{participant} is not this process ({self.participant})")
            if participant not in transition.predecessor.participants:
                raise InvalidArgument(
                    f"node {participant.node_id} is not a predecessor participant of drain "
                    f"{round_name(round_)}"
                )
            if not self.drains.known(round_) and not registry_runs(
                self._registry, transition.predecessor
            ):
                raise Refused(
                    f"local registry v{self._registry.version} does not run the predecessor of "
                    f"drain {round_name(round_)}",
                    reason=Refusal.NOT_RUNNING_PREDECESSOR,
                )
            self.drains.prepare(round_, transition)

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        """Commit releases moving partitions at the cut, Abort resumes them; idempotent."""
        self._record("resolve_local_source_drain", f"{round_name(drain)} {outcome.value}")
        async with within_deadline(self.clock, deadline, "local source drain resolution"):
            self.drains.resolve(drain, outcome)

    def owned_source_drain_resolved(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome
    ) -> bool:
        return self.drains.resolved(drain, outcome)

    def open_source_drain(self) -> AssignmentDrainTransition | None:
        return self.drains.open_transition()

    def stopped_terminal_round(
        self, predecessor: CheckpointAssignmentFence
    ) -> AssignmentDrainId | None:
        return self.drains.stopped_round(predecessor)

    # -- coordinated recovery (driven by tests and, later, the recovery protocol) ---------------
    def enter_stopped_recovery(self) -> None:
        """Coordinated recovery stopped the runtime: CREATED, runtime cancelled, intake
        fenced, shuffle dropped; an unresolved prepared drain round becomes the stopped one."""
        self._record("enter_stopped_recovery", f"v{self._registry.version}")
        self._runtime_cancelled = True
        self._coordinated_recovery = True
        if self._state in (EngineState.RUNNING, EngineState.FAULTED):
            self._state = EngineState.CREATED
        self._source_gate_closed = True
        self._drop_fence()
        self.drains.stop_sources()

    def leave_stopped_recovery(self) -> None:
        """Release: the replacement generation runs (RUNNING once an assignment is adopted)."""
        self._record("leave_stopped_recovery", f"v{self._registry.version}")
        self._runtime_cancelled = False
        self._coordinated_recovery = False
        self.drains.clear_stopped()
        if self._state is EngineState.CREATED and self._registry.version > 0:
            self._state = EngineState.RUNNING

    # -- checkpoints ---------------------------------------------------------------------------
    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        """A cluster checkpoint under the installed fence and drain transition (§4.7), by the
        injected checkpointer; success=False (never an exception) when it cannot run, with the
        error of the kind that says what to do next (a Fenced keeps its type)."""
        self._record("checkpoint_until", fence_name(self._fence))
        try:
            async with (
                within_deadline(self.clock, deadline, "checkpoint admission"),
                self.adoption_lock,
            ):
                fence, transition = self._fence, self._transition
                refusal = self._checkpoint_refusal()
            if refusal is not None:
                return CheckpointResult(success=False, error=refusal)
            assert fence is not None  # no fence is a refusal
            if self.checkpointer is None:
                return CheckpointResult(
                    success=False, error=InvalidArgument("no checkpointer is configured")
                )
            async with (
                within_deadline(self.clock, deadline, "checkpoint execution"),
                self.rotation_lock.shared(),
            ):
                return await self.checkpointer(fence, transition, deadline=deadline)
        except LaminarError as error:
            return CheckpointResult(
                success=False, error=restated(error, f"checkpoint failed: {error}")
            )

    # -- internals -----------------------------------------------------------------------------
    def _record(self, name: str, summary: str) -> None:
        self.calls.append((name, summary))

    def _drop_fence(self) -> None:
        self._fence = None
        self._transition = None
        self._shuffle = ShuffleState.INVALIDATED
        self._revision += 1

    def _intake_allowed(self) -> bool:
        return (
            self._state is EngineState.RUNNING
            and not self._runtime_cancelled
            and not self._coordinated_recovery
        )

    def _checkpoint_refusal(self) -> Refused | None:
        """Why no checkpoint may start now (Refused: NO_FENCE_INSTALLED, AUTHORITY_SUSPENDED,
        ENGINE_NOT_RUNNING), or None."""
        if self._fence is None:
            reason, why = Refusal.NO_FENCE_INSTALLED, "no assignment fence is installed"
        elif self._shuffle is ShuffleState.SUSPENDED:
            reason = Refusal.AUTHORITY_SUSPENDED
            why = f"assignment authority for {fence_name(self._fence)} is suspended"
        elif self._state is not EngineState.RUNNING:
            reason = Refusal.ENGINE_NOT_RUNNING
            why = f"the engine is {self._state.value}, not running"
        else:
            return None
        return Refused(f"checkpoint refused: {why}", reason=reason)

    def _acquired(self, snapshot: AssignmentSnapshot) -> tuple[int, ...]:
        """Run the adopt hook, then check `snapshot` against this process."""
        if self.adopt_hook is not None:
            self.adopt_hook(snapshot)
        return acquired_vnodes(self._registry, snapshot, self.participant)

    def _apply(self, snapshot: AssignmentSnapshot) -> None:
        """Run `snapshot`: the old version's authority ends until the new fence is activated."""
        self._registry = RegistrySnapshot(snapshot.assignment_version, tuple(snapshot.owners))
        self._installed_vnode_state = self.participant.node_id in snapshot.owners
        self._state = EngineState.CREATED if self._runtime_cancelled else EngineState.RUNNING
        self._source_gate_closed = True
        self._drop_fence()
