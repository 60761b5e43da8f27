"""`BaseEngine`: the `RebalanceEngine` of every process (RB §6.2; gates RB §4.15, adoption
RB §4.11 B and RB §4.14, source drains RB §2.8 and RB §4.6, checkpoints RB §4.7).

It keeps every piece of state RB §6.2 names, in memory, with the rules the control plane relies
on. An engine embeds itself by passing a `DataPlane` and a `Restorer` (docs/embedding.md): its
`host` (vnode_host.py) then runs, restores, drops and pauses the plane's vnodes and is the
coordinator's `CheckpointHost`. Without one (the control plane's tests, the simulation,
`RebalanceNode`'s default) no vnode runs and the handoff checkpoint is empty.

* Authority revision: bumped by every path that closes or (re)installs authority: closing the
  source gate, suspending or invalidating the shuffle fence, activation, adopting a new
  version, faulting, entering stopped recovery. Reopening the gate alone does not bump it.
* Adopting a new version ends the authority of the old one: intake closes and the installed
  fence and drain transition (which name the old version) are dropped, until the watcher
  activates the new fence (RB §4.12). Intake is open (`intake_open`) while the source gate is
  open and the installed fence runs (`running_fence`: ACTIVE, RUNNING, not cancelled).
* `adopt_assignment`, `adopt_recovery_assignment` and `activate_authority` take
  `adoption_lock` themselves (bounded by the deadline): callers must not hold it. The checks
  the control plane makes under the lock (`local_vnode_state_is_ready`,
  `validate_source_drain_snapshot`) never take it.
* `checkpoint_until` admits under `adoption_lock` (the admission linearization point, RB §4.1),
  then runs the injected `Checkpointer` holding `rotation_lock` shared, like any compute.

Test hooks are constructor arguments: `vnode_state_ready(fence)` (default: ready) and
`adopt_hook(snapshot)` (runs before an adoption applies; may raise Refused with reason
`Refusal.SHUFFLE_NOT_READY`). A log of the commands is the tests' (tests/rebalance/engine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import InvalidArgument, LaminarError, restated
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.cuts import HostTimings
from laminar_cluster.rebalance.engine.data_plane import DataPlane
from laminar_cluster.rebalance.engine.drains import SourceDrainLedger
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.engine.restores import Restorer
from laminar_cluster.rebalance.engine.rules import (
    ShuffleState,
    acquired_vnodes,
    check_activation,
    check_drain_prepare,
    check_recovery_adoption,
    checkpoint_refusal,
    registry_runs,
    require_committed,
    require_draining,
    require_not_faulted,
    unchanged_adoption,
)
from laminar_cluster.rebalance.engine.vnode_host import NO_VNODES, VnodeHooks, VnodeHost
from laminar_cluster.rebalance.interfaces import (
    Activation,
    Adoption,
    CheckpointResult,
    EngineState,
    RecoveryCut,
    RegistrySnapshot,
    SourceDrainOutcome,
)
from laminar_cluster.rebalance.rotation_lock import RotationLock

VnodeStateReady = Callable[[CheckpointAssignmentFence], bool]
AdoptHook = Callable[[AssignmentSnapshot], None]


class BaseEngine:
    """An in-memory `RebalanceEngine` for one process `participant` (node id and boot),
    running `data_plane` (restored through `restorer`) when it is given one."""

    def __init__(
        self,
        *,
        clock: Clock,
        participant: FenceParticipant,
        checkpointer: Checkpointer | None = None,
        vnode_state_ready: VnodeStateReady | None = None,
        adopt_hook: AdoptHook | None = None,
        data_plane: DataPlane | None = None,
        restorer: Restorer | None = None,
        timings: HostTimings | None = None,
    ) -> None:
        self.clock = clock
        self.participant = participant
        self.checkpointer = checkpointer
        self.vnode_state_ready = vnode_state_ready
        self.adopt_hook = adopt_hook
        self.adoption_lock = asyncio.Lock()
        self.rotation_lock = RotationLock()
        self.drains = SourceDrainLedger()
        self._registry = RegistrySnapshot(version=0, owners=())
        self._revision = 0
        self._state = EngineState.CREATED
        self._source_gate_closed = True
        self._shuffle = ShuffleState.NONE
        self._fence: CheckpointAssignmentFence | None = None
        self._transition: AssignmentDrainTransition | None = None
        self._installed_vnode_state = False
        self._recovery_checkpoint: RecoveryCut | None = None
        self._runtime_cancelled = False
        self._coordinated_recovery = False
        # The host of `data_plane`; `_hooks` is it, or no-ops when there is no data plane.
        self.host: VnodeHost | None = None
        self._hooks: VnodeHooks = NO_VNODES
        if data_plane is not None:
            if restorer is None:
                raise InvalidArgument("a data plane needs a restorer")
            self.host = self._hooks = VnodeHost(self, data_plane, restorer, timings)

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

    def running_fence(self) -> CheckpointAssignmentFence | None:
        """The installed fence while it runs (ACTIVE shuffle, RUNNING, runtime not cancelled),
        else None."""
        runs = self._shuffle is ShuffleState.ACTIVE and self._state is EngineState.RUNNING
        return self._fence if runs and not self._runtime_cancelled else None

    def intake_open(self) -> bool:
        """Consume while the source gate is open and the installed fence runs; a cut (held or
        being encoded) does not pause it."""
        return not self._source_gate_closed and self.running_fence() is not None

    # -- authority gates -----------------------------------------------------------------------
    def set_source_gate(self, closed: bool) -> None:
        self._source_gate_closed = closed
        if closed:
            self._revision += 1
        self._hooks.notify()

    def cluster_intake_fenced(self) -> bool:
        return self._source_gate_closed

    def invalidate_shuffle_fence(self) -> None:
        self._drop_fence()

    def suspend_shuffle_fence(self) -> None:
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
        async with (
            within_deadline(self.clock, deadline, "authority activation"),
            self.adoption_lock,
        ):
            if revision != self._revision:
                activation = Activation(installed=False, revision=self._revision)
            else:
                check_activation(self._registry, self.participant, fence, drain_transition)
                self._fence, self._transition = fence, drain_transition
                self._shuffle = ShuffleState.ACTIVE
                self._source_gate_closed = not self._intake_allowed()
                self._revision += 1
                activation = Activation(installed=True, revision=self._revision)
        self._hooks.notify()
        return activation

    # -- vnode state ---------------------------------------------------------------------------
    async def local_vnode_state_is_ready(
        self, fence: CheckpointAssignmentFence, *, deadline: float
    ) -> bool:
        """Ready when the registry runs exactly `fence`'s owner map, the hook agrees and no
        owned vnode is still restoring."""
        async with within_deadline(self.clock, deadline, "local vnode state readiness"):
            if not registry_runs(self._registry, fence):
                return False
            ready = self.vnode_state_ready is None or self.vnode_state_ready(fence)
        return ready and self._hooks.ready()

    def installed_vnode_state(self) -> bool:
        return self._installed_vnode_state

    async def fault_for_recovery_assignment(self) -> None:
        """Drop vnode state and authority; FAULTED until a recovery adoption restores cold."""
        self._installed_vnode_state = False
        self._state = EngineState.FAULTED
        self._source_gate_closed = True
        self._drop_fence()
        self._hooks.faulted()

    # -- adoption ------------------------------------------------------------------------------
    async def adopt_assignment(self, snapshot: AssignmentSnapshot, *, deadline: float) -> Adoption:
        """Run committed `snapshot` (RB §6.2): InvalidArgument for a draining or malformed one,
        a no-op for versions at or below the registry's, Refused on a faulted engine
        (ENGINE_FAULTED) or a snapshot certifying another boot of this node (ANOTHER_BOOT).
        The host drops vnodes no longer owned and restores new ones (a handoff)."""
        require_committed(snapshot)
        async with within_deadline(self.clock, deadline, "assignment adoption"), self.adoption_lock:
            unchanged = unchanged_adoption(self._registry, snapshot)
            if unchanged is not None:
                return unchanged
            require_not_faulted(self._state, snapshot)
            acquired = self._acquired(snapshot)
            self._apply(snapshot)
            self._hooks.adopted(self._registry, acquired)
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
        finishes its restore through the coordinated-recovery round (RB §4.11 B)."""
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
            check_recovery_adoption(
                snapshot,
                self.participant,
                recovery_checkpoint,
                cold=self._state in (EngineState.CREATED, EngineState.FAULTED)
                and not self._installed_vnode_state,
                acquires=bool(acquired),
            )
            self._apply(snapshot)
            self._recovery_checkpoint = recovery_checkpoint
            self._hooks.restarted(self._registry, recovery_checkpoint)
            return Adoption(snapshot.assignment_version, acquired, recovery_required=owns)

    # -- source drains -------------------------------------------------------------------------
    def validate_source_drain_snapshot(self, draining: AssignmentSnapshot) -> None:
        """A canonical draining snapshot with the registry's vnode count (InvalidArgument);
        the host remembers its target owner map for the drain prepare."""
        require_draining(self._registry, draining)
        self._hooks.remember_drain_target(draining)

    async def prepare_local_source_drain(
        self,
        transition: AssignmentDrainTransition,
        participant: FenceParticipant,
        *,
        deadline: float,
    ) -> None:
        """Stop local sources at one cut for `transition`; idempotent per transition. The host
        pauses the vnodes leaving this process while the round is open."""
        round_ = drain_id(transition)
        async with within_deadline(self.clock, deadline, "local source drain prepare"):
            check_drain_prepare(
                self._registry,
                self.participant,
                participant,
                transition,
                known=self.drains.known(round_),
            )
            self.drains.prepare(round_, transition)
        if self.drains.open_round() == round_:
            self._hooks.drain_prepared(transition)

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        """Commit releases moving partitions at the cut, Abort resumes them; idempotent."""
        async with within_deadline(self.clock, deadline, "local source drain resolution"):
            self.drains.resolve(drain, outcome)
        self._hooks.drain_resolved(drain, outcome)

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

    # -- coordinated recovery -------------------------------------------------------------------
    def enter_stopped_recovery(self) -> None:
        """Coordinated recovery stopped the runtime: CREATED, runtime cancelled, intake
        fenced, shuffle dropped; an unresolved prepared drain round becomes the stopped one."""
        self._runtime_cancelled = True
        self._coordinated_recovery = True
        if self._state in (EngineState.RUNNING, EngineState.FAULTED):
            self._state = EngineState.CREATED
        self._source_gate_closed = True
        self._drop_fence()
        self.drains.stop_sources()

    def leave_stopped_recovery(self) -> None:
        """Release: the replacement generation runs (RUNNING once an assignment is adopted)."""
        self._runtime_cancelled = False
        self._coordinated_recovery = False
        self.drains.clear_stopped()
        if self._state is EngineState.CREATED and self._registry.version > 0:
            self._state = EngineState.RUNNING
        self._hooks.notify()

    # -- checkpoints ---------------------------------------------------------------------------
    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        """A cluster checkpoint under the installed fence and drain transition (RB §4.7), by
        the injected checkpointer; success=False (never an exception) when it cannot run, with
        the error of the kind that says what to do next (a Fenced keeps its type)."""
        try:
            async with (
                within_deadline(self.clock, deadline, "checkpoint admission"),
                self.adoption_lock,
            ):
                fence, transition = self._fence, self._transition
                refusal = checkpoint_refusal(fence, self._shuffle, self._state)
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
    def _drop_fence(self) -> None:
        self._fence, self._transition = None, None
        self._shuffle = ShuffleState.INVALIDATED
        self._revision += 1

    def _intake_allowed(self) -> bool:
        running = self._state is EngineState.RUNNING
        return running and not self._runtime_cancelled and not self._coordinated_recovery

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
