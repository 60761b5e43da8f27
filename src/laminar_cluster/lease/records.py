"""Durable records of the leader authority (LA §2.3, LA §2.4, LA §3, LA §8).

Our own formats (DESIGN.md "Own formats"): field order follows the spec; tagged unions are
internally tagged (`{"kind":"drain",...}`, `{"phase":"release",...}`) because msgspec cannot
write serde's adjacent or external tagging. The canonical-bytes discipline is kept: every read
re-encodes and compares. The authority types shared with checkpoints (`LeaderProof`,
`CheckpointAssignmentFence`, `CheckpointOutcome`) come from the checkpoint layer.
"""

from __future__ import annotations

import enum
from typing import Literal

from laminar_cluster.checkpoint.records import CheckpointOutcome, RecoveryCapsuleRef
from laminar_cluster.codec import I64, U16, U32, U64, Record
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderOwner,
    LeaderProof,
)


class AuthorityHeadPointer(Record):
    """`control/leader-lease-head/v1.json`: the latest published sequence, fresh nonce each time."""

    version: Literal[1]
    sequence: U64
    nonce: str


class LeaderLeaseOwner(Record):
    """An exact process incarnation: (node, boot, process term)."""

    node: U64
    boot: str
    process_term: U64

    def proof_owner(self) -> LeaderOwner:
        return LeaderOwner(node_id=self.node, boot_id=self.boot, process_term=self.process_term)


class CatalogManifestRef(Record):
    version: Literal[1]
    sha256: str
    encoded_len: U64
    entry_count: U32


class LeaderLease(Record):
    seq: U64
    renewal_sequence: U64
    token: U64
    owner: LeaderLeaseOwner
    expires_at_ms: I64  # diagnostic only: never decides anything
    catalog_manifest: CatalogManifestRef | None

    def proof(self) -> LeaderProof:
        return LeaderProof(owner=self.owner.proof_owner(), fencing_token=self.token)

    def liveness_identity(self) -> tuple[LeaderLeaseOwner, int, int]:
        """Equal identities mean no renewal or new term happened in between."""
        return (self.owner, self.token, self.renewal_sequence)


class OutcomeLink(Record):
    sequence: U64
    epoch: U64
    checkpoint_id: U64


class AssignmentDecisionLink(Record):
    sequence: U64
    target_version: U64


class AuthorityOutcomeFloor(Record):
    deployment_id: str
    artifact_before_epoch: U64
    authority_before_epoch: U64
    terminal_anchor: CheckpointOutcome | None
    terminal_anchor_link: OutcomeLink | None
    committed_anchor: CheckpointOutcome | None
    committed_anchor_link: OutcomeLink | None


class ProcessLease(Record):
    """One node's process lease: (node, boot owner, term) with its renewal sequence."""

    node: U64
    owner: str
    term: U64
    seq: U64
    expires_at_ms: I64


class ProcessLeaseFence(Record):
    """Durable proof that one exact process term was superseded by an immediate takeover."""

    predecessor: ProcessLease
    successor: ProcessLease


class AssignmentSnapshotRef(Record):
    version: U64
    sha256: str
    encoded_len: U64


class AssignmentDrainTransition(Record):
    predecessor: CheckpointAssignmentFence
    target: CheckpointAssignmentFence
    leader: LeaderProof


class AssignmentVerdict(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


class AssignmentDrainDecision(Record, tag_field="kind", tag="drain"):
    """The settlement of one drain transition (RB §2.5). `handoff_checkpoint` (the
    committed pre-rotation checkpoint the target restores from) is present iff the verdict is
    Commit; the authority pins it to the target fence (`handoff_pins`)."""

    transition: AssignmentDrainTransition
    leader_proof: LeaderProof
    verdict: AssignmentVerdict
    handoff_checkpoint: RecoveryCapsuleRef | None

    @property
    def target_version(self) -> int:
        return self.transition.target.assignment_version


class AssignmentRecoveryDecision(Record, tag_field="kind", tag="recovery"):
    """A failure-recovery successor (RB §2.6). `recovery_checkpoint` is the
    committed cluster checkpoint the target restores from; the authority pins it to the target
    fence (`handoff_pins`). None is the initial state (our extension, LA-20): admitted only
    while no cluster checkpoint has ever committed, so there is nothing committed to restore
    and nothing committed can be lost; the target starts empty."""

    predecessor: CheckpointAssignmentFence
    target: CheckpointAssignmentFence
    proposal: AssignmentSnapshotRef
    removed_process_fences: tuple[ProcessLeaseFence, ...]
    recovery_checkpoint: RecoveryCapsuleRef | None
    leader_proof: LeaderProof

    @property
    def target_version(self) -> int:
        return self.target.assignment_version


AuthorityAssignmentDecision = AssignmentDrainDecision | AssignmentRecoveryDecision


class AuthorityAssignmentDecisionFloor(Record):
    before_target_version: U64
    terminal_anchor: AuthorityAssignmentDecision | None
    terminal_anchor_link: AssignmentDecisionLink | None


class RecoveryFaultPublisher(Record):
    participant: FenceParticipant
    process_term: U64


class AuthorityRecoveryFaultSlot(Record):
    publisher: RecoveryFaultPublisher
    request_sequence: U64
    fault_sequence: U64
    active: bool


class RecoveryReleaseId(Record):
    protocol_version: U16
    generation: U64
    nonce: str
    driver: U64
    epoch: U64
    round_sha256: str


class RecoveryReleaseTerminalRef(Record):
    release: RecoveryReleaseId
    sha256: str
    encoded_len: U64


class AuthorityRecoveryReleaseCommit(Record):
    terminal: RecoveryReleaseTerminalRef
    leader_proof: LeaderProof


class RecoveryReleaseLink(Record):
    sequence: U64
    terminal: RecoveryReleaseTerminalRef


class LeaderAuthorityRecord(Record):
    """The full authority state at one sequence (v9). Admitting fields are set only on the
    record that admits their event; carried fields are copied forward (LA §3.4)."""

    version: Literal[9]
    lease: LeaderLease
    checkpoint_outcome: CheckpointOutcome | None
    previous_outcome: OutcomeLink | None
    outcome_head: OutcomeLink | None
    previous_commit: OutcomeLink | None
    commit_head: OutcomeLink | None
    outcome_floor: AuthorityOutcomeFloor | None
    assignment_decision: AuthorityAssignmentDecision | None
    previous_assignment_decision: AssignmentDecisionLink | None
    assignment_decision_head: AssignmentDecisionLink | None
    assignment_decision_floor: AuthorityAssignmentDecisionFloor | None
    recovery_fault_revision: U64
    recovery_fault_slots: tuple[AuthorityRecoveryFaultSlot, ...]
    recovery_release_commit: AuthorityRecoveryReleaseCommit | None
    recovery_release_head: RecoveryReleaseLink | None

    @classmethod
    def initial(cls, lease: LeaderLease) -> LeaderAuthorityRecord:
        return cls(
            version=9,
            lease=lease,
            checkpoint_outcome=None,
            previous_outcome=None,
            outcome_head=None,
            previous_commit=None,
            commit_head=None,
            outcome_floor=None,
            assignment_decision=None,
            previous_assignment_decision=None,
            assignment_decision_head=None,
            assignment_decision_floor=None,
            recovery_fault_revision=0,
            recovery_fault_slots=(),
            recovery_release_commit=None,
            recovery_release_head=None,
        )

    def preserve_with_lease(self, lease: LeaderLease) -> LeaderAuthorityRecord:
        """Carried fields copied, admitting fields cleared, the new lease installed."""
        return LeaderAuthorityRecord(
            version=9,
            lease=lease,
            checkpoint_outcome=None,
            previous_outcome=None,
            outcome_head=self.outcome_head,
            previous_commit=None,
            commit_head=self.commit_head,
            outcome_floor=self.outcome_floor,
            assignment_decision=None,
            previous_assignment_decision=None,
            assignment_decision_head=self.assignment_decision_head,
            assignment_decision_floor=self.assignment_decision_floor,
            recovery_fault_revision=self.recovery_fault_revision,
            recovery_fault_slots=self.recovery_fault_slots,
            recovery_release_commit=None,
            recovery_release_head=self.recovery_release_head,
        )


class RecoveryFault(Record):
    reporter: U64
    sequence: U64


class RecoveryRoundId(Record):
    generation: U64
    nonce: str
    driver: U64


class RecoveryRound(Record):
    """A frozen recovery round: who drives it, under which fence, covering which faults."""

    id: RecoveryRoundId
    leader_proof: LeaderProof
    assignment_fence: CheckpointAssignmentFence
    evidence_participants: tuple[FenceParticipant, ...]
    fault_revision: U64
    faults: tuple[RecoveryFault, ...]


class PhasePrepare(Record, tag_field="phase", tag="prepare"):
    pass


class PhaseStart(Record, tag_field="phase", tag="start"):
    epoch: U64


class PhaseRelease(Record, tag_field="phase", tag="release"):
    epoch: U64


class PhaseReleaseCommitted(Record, tag_field="phase", tag="release_committed"):
    epoch: U64


RecoverPhase = PhasePrepare | PhaseStart | PhaseRelease | PhaseReleaseCommitted


class RecoveryAnnouncement(Record):
    """A recovery round in one phase; in phase release_committed, the release terminal blob."""

    version: Literal[1]
    round: RecoveryRound
    phase: RecoverPhase


class CatalogManifestEntry(Record):
    canonical_name: str
    kind: str
    ddl: str


class CatalogManifest(Record):
    """The cluster catalog (DDL inventory), sealed once per namespace."""

    version: Literal[1]
    entries: tuple[CatalogManifestEntry, ...]
