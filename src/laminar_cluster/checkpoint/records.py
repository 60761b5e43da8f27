"""Durable records of the checkpoint decision store (CD §3).

Field order is JSON key order (canonical family A), except the recovery capsule, whose keys are
sorted (family B). UUIDs are strings checked by `codec.shape.canonical_uuid` (lowercase,
hyphenated, non-nil) so that the error names the field. The fencing types they carry
(`LeaderProof`, `CheckpointAssignmentFence`) are `laminar_cluster.fencing`'s.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from laminar_cluster.codec import U16, U64, Record
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    LeaderProof,
)


class CheckpointScope(enum.Enum):
    LOCAL = "local"
    CLUSTER = "cluster"


class CheckpointVerdict(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


class AllocatorMode(enum.Enum):
    """How mutable records are updated; persisted in the identity and checked on every open."""

    NATIVE_CAS = "native_cas"
    LOCAL_SINGLE_WRITER = "local_single_writer"


class AttemptRelation(enum.Enum):
    EXACT = "exact"
    OLDER = "older"
    NEWER = "newer"
    CONFLICT = "conflict"


class CheckpointAttempt(Record):
    """One checkpoint attempt. Runtime attempts are canonical: epoch == checkpoint_id != 0."""

    epoch: U64
    checkpoint_id: U64

    @classmethod
    def canonical(cls, checkpoint_id: int) -> CheckpointAttempt:
        return cls(epoch=checkpoint_id, checkpoint_id=checkpoint_id)

    def is_canonical(self) -> bool:
        return self.epoch != 0 and self.epoch == self.checkpoint_id

    def relation_to(self, other: CheckpointAttempt) -> AttemptRelation:
        """Exact, Older (both lower), Newer (both higher) or Conflict; no lexicographic order."""
        if (self.epoch, self.checkpoint_id) == (other.epoch, other.checkpoint_id):
            return AttemptRelation.EXACT
        if self.epoch < other.epoch and self.checkpoint_id < other.checkpoint_id:
            return AttemptRelation.OLDER
        if self.epoch > other.epoch and self.checkpoint_id > other.checkpoint_id:
            return AttemptRelation.NEWER
        return AttemptRelation.CONFLICT


class RecoveryCapsuleRef(Record):
    """A content address of a recovery capsule: attempt, SHA-256 of the bytes, and their length."""

    epoch: U64
    checkpoint_id: U64
    sha256: str
    len: U64


class CheckpointOutcome(Record):
    """The one immutable commit-or-abort decision of one attempt (version 2)."""

    version: Literal[2]
    scope: CheckpointScope
    epoch: U64
    checkpoint_id: U64
    deployment_id: str
    assignment_fence: CheckpointAssignmentFence | None
    leader_proof: LeaderProof | None
    recovery_capsule: RecoveryCapsuleRef | None
    verdict: CheckpointVerdict

    def is_commit(self) -> bool:
        return self.verdict is CheckpointVerdict.COMMIT

    @property
    def attempt(self) -> CheckpointAttempt:
        return CheckpointAttempt(epoch=self.epoch, checkpoint_id=self.checkpoint_id)


class DeploymentIdentity(Record):
    """The deployment's create-once identity, and in shared mode the allocation head (v2)."""

    version: Literal[2]
    id: str
    allocator_mode: AllocatorMode
    checkpoint_id: U64
    allocation_id: str


class OutcomeGcFloor(Record):
    """The monotone retention floor of one deployment, with its continuity anchors (v4)."""

    version: Literal[4]
    deployment_id: str
    before_epoch: U64
    terminal_anchor: CheckpointOutcome | None
    committed_anchor: CheckpointOutcome | None


class PipelineIdentity(Record):
    canonical_version: U16
    sha256: str


class CheckpointSinkOpenWitness(Record):
    """ "These exactly-once sinks may have an open external transaction for this attempt" (v1)."""

    version: Literal[1]
    deployment_id: str
    pipeline_identity: PipelineIdentity
    participant_id: U64
    attempt: CheckpointAttempt
    committable_sinks: tuple[str, ...]
    create_token: str


class WitnessOpen(Record, tag_field="status", tag="open"):
    witness: CheckpointSinkOpenWitness


class WitnessClosed(Record, tag_field="status", tag="closed"):
    witness: CheckpointSinkOpenWitness
    close_token: str


class CheckpointSinkOpenWitnessSlot(Record):
    """The singleton witness slot: open, or closed by a tombstone; never absent again (v1)."""

    version: Literal[1]
    state: WitnessOpen | WitnessClosed


class CapsuleParticipant(Record):
    """One participant of a cluster checkpoint: its incarnation and manifest digest."""

    node_id: U64
    boot_incarnation: str
    manifest_sha256: str
    vnodes: tuple[U16, ...]


class ClusterRecoveryCapsule(Record):
    """The committed checkpoint index a cluster commit points to (v5; sorted-key encoding).

    It says what recovery restores: every participant's manifest (covering the fence exactly),
    every source's offset, the vnode count and fence, whether the state may be restored under
    another assignment, and the previous committed capsule.
    """

    version: Literal[5]
    attempt: CheckpointAttempt
    deployment_id: str
    pipeline_identity: PipelineIdentity
    assignment_fence: CheckpointAssignmentFence
    participants: tuple[CapsuleParticipant, ...]
    source_offsets: dict[str, U64]
    portable: bool
    predecessor: RecoveryCapsuleRef | None


class RecoveryCapsuleGcCursor(Record):
    """Where the capsule sweep stopped: the last location examined in this pass (v1)."""

    version: Literal[1]
    deployment_id: str
    offset: str | None


class Created(msgspec.Struct, frozen=True):
    """This call created the outcome."""

    outcome: CheckpointOutcome


class Unchanged(msgspec.Struct, frozen=True):
    """An identical outcome was already durable."""

    outcome: CheckpointOutcome


class Conflict(msgspec.Struct, frozen=True):
    """A different outcome won; the caller must obey `winner`."""

    winner: CheckpointOutcome


RecordOutcomeResult = Created | Unchanged | Conflict
