"""The two interfaces the rebalance plane drives (spec_rebalance §6.2, §6.3).

`RebalanceEngine` is the data plane of one process: what it owns, its gates and locks, source
drains and checkpoints. `ClusterController` is this process's view of the cluster: identity,
membership, leadership and the durable per-process slots. Both are small on purpose; the Rust
seed's surface is larger because it also carries shuffle transport internals.

Time: every `deadline` is an absolute instant on the controller's `Clock.monotonic()`.
Cancellation: every method must be safe to cancel at any await; a cancelled call leaves either
nothing or an idempotent, re-readable effect.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from laminar_cluster.assignment.digest import AssignmentDrainId
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import Clock
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition, ProcessLeaseFence
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption
from laminar_cluster.rebalance.rotation_lock import RotationLock


class InitialState(enum.Enum):
    """The restore cut of a recovery generation decided before any cluster checkpoint had
    committed (docs/protocols/rebalance.md "Recovery to the initial state"): every owned vnode
    starts empty, every source at its start. Nothing committed exists, so nothing is lost."""

    INITIAL_STATE = "initial-state"


INITIAL_STATE: Final = InitialState.INITIAL_STATE
RecoveryCut = RecoveryCapsuleRef | InitialState  # what a recovery participant restores from


def recovery_cut(checkpoint: RecoveryCapsuleRef | None) -> RecoveryCut:
    """A recovery decision's checkpoint as a restore cut: None is the initial state."""
    return INITIAL_STATE if checkpoint is None else checkpoint


def cut_name(cut: RecoveryCapsuleRef | InitialState | None) -> str:
    """For log messages: `checkpoint epoch N` or `the initial state`."""
    if cut is None or cut is INITIAL_STATE:
        return "the initial state"
    assert isinstance(cut, RecoveryCapsuleRef)
    return f"checkpoint epoch {cut.epoch}"


class SourceDrainOutcome(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


class EngineState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    FAULTED = "faulted"


@dataclass(frozen=True, slots=True)
class RegistrySnapshot:
    """The local vnode registry: the assignment version this process runs and its owners
    (version 0 and no owners before the first adoption)."""

    version: int
    owners: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Adoption:
    version: int
    newly_acquired: tuple[int, ...]
    # The new assignment gives this process vnodes it must restore through recovery (§4.11 B).
    recovery_required: bool


@dataclass(frozen=True, slots=True)
class Activation:
    installed: bool
    revision: int


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What `checkpoint_until` reports (§4.7)."""

    success: bool
    epoch: int = 0
    checkpoint_id: int = 0
    error: LaminarError | None = None  # why it failed, of the kind that says what to do next
    continuation_error: LaminarError | None = None


class RebalanceEngine(Protocol):
    """The data plane of one process, as the control plane sees it (§6.2)."""

    # Serializes adoption, drain-transition installation, live finalization and the drain CAS;
    # the linearization point for checkpoint admission (§4.1).
    adoption_lock: asyncio.Lock
    # Compute cycles hold it shared; closing authority takes it exclusively (§4.1).
    rotation_lock: RotationLock

    # -- state -------------------------------------------------------------------------------
    def registry(self) -> RegistrySnapshot: ...

    def authority_revision(self) -> int:
        """Monotonic; bumped by every path that closes or (re)installs authority."""
        ...

    def state(self) -> EngineState: ...

    def runtime_cancelled(self) -> bool: ...

    def coordinated_recovery_in_progress(self) -> bool: ...

    # -- authority gates ---------------------------------------------------------------------
    def set_source_gate(self, closed: bool) -> None: ...

    def cluster_intake_fenced(self) -> bool: ...

    def invalidate_shuffle_fence(self) -> None:
        """Drop the certificate and cancel in-flight sends (recovery closure)."""
        ...

    def suspend_shuffle_fence(self) -> None:
        """Pause, keeping the certificate so the same version can resume (§4.15)."""
        ...

    async def activate_authority(
        self,
        fence: CheckpointAssignmentFence,
        drain_transition: AssignmentDrainTransition | None,
        revision: int,
        *,
        deadline: float,
    ) -> Activation:
        """Install `fence` (and the drain transition) and reopen intake when allowed; refuse
        (installed=False) when the revision moved since `revision` was read."""
        ...

    # -- vnode state -------------------------------------------------------------------------
    def has_unapplied_vnode_transition(self) -> bool: ...

    async def local_vnode_state_is_ready(
        self, fence: CheckpointAssignmentFence, *, deadline: float
    ) -> bool: ...

    def installed_vnode_state(self) -> bool:
        """True when this process holds restored/processed state for any vnode."""
        ...

    async def fault_for_recovery_assignment(self) -> None:
        """Drop installed vnode state and move to FAULTED, so a cold restore can follow."""
        ...

    # -- adoption ----------------------------------------------------------------------------
    async def adopt_assignment(self, snapshot: AssignmentSnapshot, *, deadline: float) -> Adoption:
        """Run the committed `snapshot` (never a draining one). Idempotent for versions at or
        below the registry's. Raises Refused (reason `Refusal.SHUFFLE_NOT_READY`) when it must
        wait: the local graph still consumes a staged transition under the predecessor
        certificate (§4.11 B); the watcher keeps the predecessor and retries next tick."""
        ...

    async def adopt_recovery_assignment(
        self,
        snapshot: AssignmentSnapshot,
        recovery_checkpoint: RecoveryCut | None,
        *,
        deadline: float,
    ) -> Adoption:
        """Run a recovery generation: owned vnodes are restored cold from
        `recovery_checkpoint` (INITIAL_STATE: they start empty; None for a process that owns
        nothing in it)."""
        ...

    # -- source drains -----------------------------------------------------------------------
    def validate_source_drain_snapshot(self, draining: AssignmentSnapshot) -> None: ...

    async def prepare_local_source_drain(
        self,
        transition: AssignmentDrainTransition,
        participant: FenceParticipant,
        *,
        deadline: float,
    ) -> None:
        """Stop every local source at one exact cut; idempotent per transition."""
        ...

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        """Commit: moving partitions are released at the cut. Abort: they resume."""
        ...

    def owned_source_drain_resolved(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome
    ) -> bool: ...

    def open_source_drain(self) -> AssignmentDrainTransition | None:
        """The prepared, unresolved drain whose local sources are stopped, if any (whoever
        prepared it: the watcher's ack or this process's own rotation as leader)."""
        ...

    def stopped_terminal_round(
        self, predecessor: CheckpointAssignmentFence
    ) -> AssignmentDrainId | None:
        """The drain round whose source tasks coordinated recovery already stopped, if any."""
        ...

    # -- checkpoints -------------------------------------------------------------------------
    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        """A complete cluster checkpoint under the installed fence (and drain transition),
        decided in the leader authority (§4.7)."""
        ...


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One member as the rebalance plane sees it (§6.3)."""

    node_id: int
    state: str  # "joining" | "active" | "suspected" | "draining" | "left" | "dead"
    failure_domain: str | None = None


class MembersWatch(Protocol):
    """A versioned watch of the member list (§4.2)."""

    def version(self) -> int: ...

    def current(self) -> tuple[NodeInfo, ...]: ...

    async def changed(self, since: int) -> int:
        """Return the first version > `since`; Refused (reason
        `Refusal.MEMBERS_WATCH_CLOSED`) once the watch is closed."""
        ...


class ClusterController(Protocol):
    """This process's view of the cluster (§6.3)."""

    clock: Clock
    node_id: int
    boot: str  # this process's boot incarnation (`recovery_incarnation`)

    def local_participant(self) -> FenceParticipant: ...

    def checkpoint_authority(self) -> LeaderLeaseStore: ...

    # -- identity and process leases ---------------------------------------------------------
    def process_lease_is_live(self) -> bool: ...

    async def recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]:
        """The current boot of every id; Refused (reason `Refusal.NO_LIVE_INCARNATION`)
        naming any id without one."""
        ...

    async def available_recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]:
        """Like the above, omitting ids without a published boot."""
        ...

    async def verify_current_process_incarnation(
        self, participant: FenceParticipant, *, deadline: float
    ) -> bool:
        """Is `participant` still the durable owner of its node's process lease?"""
        ...

    async def fence_process_incarnation(
        self, participant: FenceParticipant, *, deadline: float
    ) -> ProcessLeaseFence:
        """Take over `participant`'s process lease; Refused with reason
        `Refusal.PROCESS_RENEWED` when it is still renewing."""
        ...

    def process_fencing_deadline(self, timeout_s: float) -> float: ...

    # -- membership --------------------------------------------------------------------------
    def members_watch(self) -> MembersWatch: ...

    def assignable_instances(self) -> tuple[int, ...]:
        """Active peers plus self unless draining; sorted, unique."""
        ...

    def is_unresponsive(self, node_id: int) -> bool: ...

    def admit_successor_process(self, participant: FenceParticipant) -> bool: ...

    # -- leadership --------------------------------------------------------------------------
    def is_leader(self) -> bool: ...

    def capture_leader_proof(self) -> LeaderProof | None: ...

    def proof_is_live(self, proof: LeaderProof) -> bool: ...

    # -- recovery mode -----------------------------------------------------------------------
    def is_recovering(self) -> bool: ...

    def set_recovering(self, recovering: bool) -> None:
        """Clearing it also forgets the stopped-recovery request."""
        ...

    def request_stopped_recovery(self, transition: AssignmentDrainTransition) -> None:
        """A missed ack quorum left `transition`'s draining head to coordinated recovery."""
        ...

    def stopped_recovery_request(self) -> AssignmentDrainTransition | None: ...

    async def publish_local_recovery_fault(self, *, deadline: float) -> None: ...

    # -- local fence and transition slots (in memory) ----------------------------------------
    def publish_checkpoint_assignment_fence(
        self, fence: CheckpointAssignmentFence | None
    ) -> None: ...

    def certify_owner_map(self, version: int) -> CheckpointAssignmentFence | None: ...

    def publish_checkpoint_drain_transition(
        self, transition: AssignmentDrainTransition | None
    ) -> None: ...

    def checkpoint_drain_transition(self) -> AssignmentDrainTransition | None: ...

    def clear_checkpoint_drain_transition_if_matches(
        self, transition: AssignmentDrainTransition
    ) -> bool: ...

    # -- durable per-process slots -----------------------------------------------------------
    async def announce_drain_ack(
        self, transition: AssignmentDrainTransition, *, deadline: float
    ) -> None: ...

    async def drain_ack_quorum_reached(
        self, transition: AssignmentDrainTransition, *, deadline: float
    ) -> bool: ...

    async def read_adopted_assignments(
        self, *, deadline: float
    ) -> tuple[CheckpointAssignmentAdoption, ...]: ...

    async def announce_adopted_assignment(
        self, adoption: CheckpointAssignmentAdoption, *, deadline: float
    ) -> None: ...
