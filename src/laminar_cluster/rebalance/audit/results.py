"""What an audit of an assignment generation against the authority establishes: the drain
outcome, the recovery checkpoint and its pin state, and the audited authority of a head."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.interfaces import RecoveryCut, SourceDrainOutcome, recovery_cut
from laminar_cluster.rebalance.refusals import Refusal


class PinState(enum.Enum):
    """Where a recovery generation's checkpoint pin stands (RB §2.10)."""

    ACTIVE = "active"  # the pin on this target is still unresolved
    PROPAGATED = "propagated"  # moved to D(n+1)'s target, not materialized yet
    CONSUMED = "consumed"  # a checkpoint committed under this target


@dataclass(frozen=True, slots=True)
class AuditedDrainOutcome:
    transition: AssignmentDrainTransition
    outcome: SourceDrainOutcome
    handoff_checkpoint: RecoveryCapsuleRef | None

    def committed_handoff_checkpoint(self) -> RecoveryCapsuleRef | None:
        return self.handoff_checkpoint if self.outcome is SourceDrainOutcome.COMMIT else None


@dataclass(frozen=True, slots=True)
class AuditedRecoveryCheckpoint:
    """`checkpoint` and `origin` are None for a recovery to the initial state (LA-20), while
    no cluster checkpoint has committed (Active or Propagated)."""

    state: PinState
    checkpoint: RecoveryCapsuleRef | None  # Consumed: the newer committed head
    origin: CheckpointAssignmentFence | None  # the assignment the cut was taken under
    successor: CheckpointAssignmentFence | None = None  # Propagated only

    @property
    def restore_cut(self) -> RecoveryCut:
        """What a participant restores from: the checkpoint, or the initial state."""
        return recovery_cut(self.checkpoint)


@dataclass(frozen=True, slots=True)
class AuditedAssignmentAuthority:
    """What the authority says about one generation (RB §2.10): no successor edge (draining
    heads and version 1), a drain terminal, or a recovery generation."""

    target_version: int
    predecessor: CheckpointAssignmentFence | None = None
    terminal: AuditedDrainOutcome | None = None
    recovery: AuditedRecoveryCheckpoint | None = None
    recovery_leader_proof: LeaderProof | None = None

    @property
    def is_recovery(self) -> bool:
        return self.recovery is not None

    @property
    def recovery_pin_is_active(self) -> bool:
        return self.recovery is not None and self.recovery.state is PinState.ACTIVE

    @property
    def propagated_recovery_successor(self) -> CheckpointAssignmentFence | None:
        if self.recovery is None or self.recovery.state is not PinState.PROPAGATED:
            return None
        return self.recovery.successor

    @property
    def active_recovery_leader_proof(self) -> LeaderProof | None:
        return self.recovery_leader_proof if self.recovery_pin_is_active else None

    def retained_predecessor(self, local_version: int) -> CheckpointAssignmentFence:
        """The predecessor fence, when this generation is exactly `local_version + 1`
        (Refused, NOT_EXACT_SUCCESSOR, otherwise)."""
        if local_version + 1 != self.target_version or self.predecessor is None:
            raise Refused(
                f"assignment {self.target_version} is not the exact audited successor of local "
                f"assignment {local_version}",
                reason=Refusal.NOT_EXACT_SUCCESSOR,
            )
        return self.predecessor
