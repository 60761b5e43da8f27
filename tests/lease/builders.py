"""Builders of valid leader authority records for the validation tests.

`carried()` is a non-admitting record at sequence 40 with every carried field set (outcome and
Commit heads, both floors with anchors, an assignment head, tombstoned fault slots, a release
head, a sealed catalog); `commit()`, `abort()`, `drain_rec()`, `recovery_rec()`, `fault_rec()`
and `release_rec()` admit one event on top of it; `terminal_floor_rec()` and
`commit_floor_rec()` put the heads on their floor anchors. Each is valid (tested).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    RecoveryCapsuleRef,
)
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderOwner,
    LeaderProof,
)
from laminar_cluster.lease import validate as v
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    AuthorityAssignmentDecisionFloor,
    AuthorityOutcomeFloor,
    AuthorityRecoveryFaultSlot,
    AuthorityRecoveryReleaseCommit,
    CatalogManifestRef,
    LeaderAuthorityRecord,
    LeaderLease,
    LeaderLeaseOwner,
    OutcomeLink,
    ProcessLease,
    ProcessLeaseFence,
    RecoveryFaultPublisher,
    RecoveryReleaseId,
    RecoveryReleaseLink,
    RecoveryReleaseTerminalRef,
)

replace = msgspec.structs.replace
NIL = "00000000-0000-0000-0000-000000000000"
SHA = "ab" * 32


def uid(n: int) -> str:
    return str(uuid.UUID(int=n, version=4))


OWNER = LeaderLeaseOwner(node=7, boot=uid(1), process_term=3)
DEPLOYMENT = uid(0xDEAD0100)
CATALOG = CatalogManifestRef(version=1, sha256="cd" * 32, encoded_len=1234, entry_count=3)
PROOF = LeaderProof(owner=OWNER.proof_owner(), fencing_token=2)
OLD_PROOF = LeaderProof(owner=OWNER.proof_owner(), fencing_token=1)
RIVAL_PROOF = LeaderProof(
    owner=LeaderOwner(node_id=8, boot_id=uid(2), process_term=1), fencing_token=3
)
ROSTER = ((7, uid(1)), (1000, uid(50)))


def lease(seq: int = 40, renewal: int = 38, token: int = 2, **kw: Any) -> LeaderLease:
    fields: dict[str, Any] = {"owner": OWNER, "expires_at_ms": 1_700_000_005_000}
    fields["catalog_manifest"] = CATALOG
    fields.update(kw)
    return LeaderLease(seq=seq, renewal_sequence=renewal, token=token, **fields)


def fence(version: int, roster: tuple[tuple[int, str], ...] = ROSTER) -> CheckpointAssignmentFence:
    return CheckpointAssignmentFence(
        assignment_version=version,
        vnode_count=256,
        assignment_digest=tuple(range(1, 33)),
        participants=tuple(FenceParticipant(node_id=n, boot_incarnation=b) for n, b in roster),
    )


def outcome(epoch: int, commit: bool, proof: LeaderProof = PROOF, **kw: Any) -> CheckpointOutcome:
    fields: dict[str, Any] = {
        "version": 2,
        "scope": CheckpointScope.CLUSTER,
        "epoch": epoch,
        "checkpoint_id": epoch,
        "deployment_id": DEPLOYMENT,
        "assignment_fence": fence(1),
        "leader_proof": proof,
        "recovery_capsule": (
            RecoveryCapsuleRef(epoch=epoch, checkpoint_id=epoch, sha256=SHA, len=100)
            if commit
            else None
        ),
        "verdict": CheckpointVerdict.COMMIT if commit else CheckpointVerdict.ABORT,
    }
    fields.update(kw)
    return CheckpointOutcome(**fields)


def olink(seq: int, epoch: int, checkpoint_id: int | None = None) -> OutcomeLink:
    cid = epoch if checkpoint_id is None else checkpoint_id
    return OutcomeLink(sequence=seq, epoch=epoch, checkpoint_id=cid)


def dlink(seq: int, target: int) -> AssignmentDecisionLink:
    return AssignmentDecisionLink(sequence=seq, target_version=target)


def cref(epoch: int) -> RecoveryCapsuleRef:
    """A canonical committed-checkpoint reference of attempt `epoch`."""
    return RecoveryCapsuleRef(epoch=epoch, checkpoint_id=epoch, sha256=SHA, len=100)


def drain(
    target: int,
    *,
    commit: bool = True,
    proof: LeaderProof = PROOF,
    leader: LeaderProof | None = None,
) -> AssignmentDrainDecision:
    transition = AssignmentDrainTransition(
        predecessor=fence(target - 1), target=fence(target), leader=leader or proof
    )
    verdict = AssignmentVerdict.COMMIT if commit else AssignmentVerdict.ABORT
    return AssignmentDrainDecision(
        transition=transition,
        leader_proof=proof,
        verdict=verdict,
        handoff_checkpoint=cref(target) if commit else None,
    )


def pfence(
    node: int, owner: str, *, term: int = 4, seq: int = 10, succ: dict[str, Any] | None = None
) -> ProcessLeaseFence:
    successor: dict[str, Any] = {"node": node, "owner": uid(99), "term": term + 1, "seq": seq + 1}
    successor.update(succ or {})
    return ProcessLeaseFence(
        predecessor=ProcessLease(node=node, owner=owner, term=term, seq=seq, expires_at_ms=0),
        successor=ProcessLease(expires_at_ms=0, **successor),
    )


def recovery(version: int = 7, proof: LeaderProof = PROOF, **kw: Any) -> AssignmentRecoveryDecision:
    fields: dict[str, Any] = {
        "predecessor": fence(version - 1, ((7, uid(1)), (9, uid(3)))),
        "target": fence(version, ((7, uid(1)), (11, uid(4)))),
        "proposal": AssignmentSnapshotRef(version=version, sha256=SHA, encoded_len=4096),
        "removed_process_fences": (pfence(9, uid(3)),),
        "recovery_checkpoint": cref(version - 1),
        "leader_proof": proof,
    }
    fields.update(kw)
    return AssignmentRecoveryDecision(**fields)


def slot(node: int, fault: int, active: bool, **kw: Any) -> AuthorityRecoveryFaultSlot:
    boot = kw.pop("boot", uid(200 + node))
    publisher = RecoveryFaultPublisher(
        participant=FenceParticipant(node_id=node, boot_incarnation=boot),
        process_term=kw.pop("term", 1),
    )
    fields: dict[str, Any] = {"request_sequence": 1, "fault_sequence": fault, "active": active}
    fields.update(kw)
    return AuthorityRecoveryFaultSlot(publisher=publisher, **fields)


def release_ref(generation: int, **kw: Any) -> RecoveryReleaseTerminalRef:
    release = RecoveryReleaseId(
        protocol_version=1,
        generation=generation,
        nonce=uid(300 + generation),
        driver=7,
        epoch=12,
        round_sha256="ef" * 32,
    )
    fields: dict[str, Any] = {"release": release, "sha256": SHA, "encoded_len": 2048}
    fields.update(kw)
    return RecoveryReleaseTerminalRef(**fields)


FLOOR = AuthorityOutcomeFloor(
    deployment_id=DEPLOYMENT,
    artifact_before_epoch=10,
    authority_before_epoch=20,
    terminal_anchor=outcome(15, False, OLD_PROOF),
    terminal_anchor_link=olink(16, 15),
    committed_anchor=outcome(8, True, OLD_PROOF),
    committed_anchor_link=olink(9, 8),
)
ASSIGNMENT_FLOOR = AuthorityAssignmentDecisionFloor(
    before_target_version=5,
    terminal_anchor=drain(4, proof=OLD_PROOF),
    terminal_anchor_link=dlink(12, 4),
)


def carried() -> LeaderAuthorityRecord:
    return replace(
        LeaderAuthorityRecord.initial(lease()),
        outcome_head=olink(30, 25),
        commit_head=olink(27, 22),
        outcome_floor=FLOOR,
        assignment_decision_head=dlink(20, 6),
        assignment_decision_floor=ASSIGNMENT_FLOOR,
        recovery_fault_revision=19,
        recovery_fault_slots=(slot(9, 17, False), slot(11, 18, False)),
        recovery_release_head=RecoveryReleaseLink(sequence=19, terminal=release_ref(2)),
    )


def commit() -> LeaderAuthorityRecord:
    return replace(
        carried(),
        checkpoint_outcome=outcome(30, True),
        previous_outcome=olink(30, 25),
        outcome_head=olink(40, 30),
        previous_commit=olink(27, 22),
        commit_head=olink(40, 30),
    )


def abort() -> LeaderAuthorityRecord:
    return replace(
        carried(),
        checkpoint_outcome=outcome(30, False),
        previous_outcome=olink(30, 25),
        outcome_head=olink(40, 30),
    )


def drain_rec() -> LeaderAuthorityRecord:
    return replace(
        carried(),
        assignment_decision=drain(7),
        previous_assignment_decision=dlink(20, 6),
        assignment_decision_head=dlink(40, 7),
    )


def recovery_rec() -> LeaderAuthorityRecord:
    return replace(drain_rec(), assignment_decision=recovery(7))


def fault_rec() -> LeaderAuthorityRecord:
    slots = (slot(9, 40, True, request_sequence=2), slot(11, 18, False))
    return replace(carried(), recovery_fault_revision=40, recovery_fault_slots=slots)


def release_rec() -> LeaderAuthorityRecord:
    ref = release_ref(3)
    return replace(
        carried(),
        recovery_fault_revision=40,
        recovery_fault_slots=(slot(9, 36, False), slot(11, 37, False)),
        recovery_release_commit=AuthorityRecoveryReleaseCommit(terminal=ref, leader_proof=PROOF),
        recovery_release_head=RecoveryReleaseLink(sequence=40, terminal=ref),
    )


def terminal_floor_rec() -> LeaderAuthorityRecord:
    """Only a terminal floor: the outcome head is its anchor, no Commit at all."""
    floor = replace(
        FLOOR,
        artifact_before_epoch=0,
        committed_anchor=None,
        committed_anchor_link=None,
    )
    return replace(carried(), outcome_floor=floor, outcome_head=olink(16, 15), commit_head=None)


def commit_floor_rec() -> LeaderAuthorityRecord:
    """Both floors at epoch 10, one Commit anchor for both, both heads on it."""
    anchor = outcome(8, True, OLD_PROOF)
    floor = AuthorityOutcomeFloor(
        deployment_id=DEPLOYMENT,
        artifact_before_epoch=10,
        authority_before_epoch=10,
        terminal_anchor=anchor,
        terminal_anchor_link=olink(9, 8),
        committed_anchor=anchor,
        committed_anchor_link=olink(9, 8),
    )
    return replace(
        carried(), outcome_floor=floor, outcome_head=olink(9, 8), commit_head=olink(9, 8)
    )


BASES: dict[str, Callable[[], LeaderAuthorityRecord]] = {
    "carried": carried,
    "commit": commit,
    "abort": abort,
    "drain": drain_rec,
    "recovery": recovery_rec,
    "fault": fault_rec,
    "release": release_rec,
    "terminal_floor": terminal_floor_rec,
    "commit_floor": commit_floor_rec,
}


def with_lease(record: LeaderAuthorityRecord, **kw: Any) -> LeaderAuthorityRecord:
    return replace(record, lease=replace(record.lease, **kw))


def with_floor(record: LeaderAuthorityRecord, **kw: Any) -> LeaderAuthorityRecord:
    assert record.outcome_floor is not None
    return replace(record, outcome_floor=replace(record.outcome_floor, **kw))


def with_afloor(record: LeaderAuthorityRecord, **kw: Any) -> LeaderAuthorityRecord:
    assert record.assignment_decision_floor is not None
    return replace(
        record, assignment_decision_floor=replace(record.assignment_decision_floor, **kw)
    )


def with_outcome(record: LeaderAuthorityRecord, **kw: Any) -> LeaderAuthorityRecord:
    assert record.checkpoint_outcome is not None
    return replace(record, checkpoint_outcome=replace(record.checkpoint_outcome, **kw))


def expect_violation(record: LeaderAuthorityRecord, substring: str) -> None:
    with pytest.raises(ShapeViolation) as caught:
        v.validate_record(record)
    assert substring in str(caught.value), str(caught.value)


Mutation = Callable[[LeaderAuthorityRecord], LeaderAuthorityRecord]
LOCAL_ANCHOR = outcome(
    15, False, scope=CheckpointScope.LOCAL, assignment_fence=None, leader_proof=None
)
BAD_CATALOG = "leader lease catalog manifest is invalid"
LINK = "checkpoint outcome link requires a nonzero authority sequence and one canonical"
FLOOR_ = "outcome floor requires a canonical deployment and ordered authority/artifact horizons"
TERMINAL = "outcome floor terminal anchor does not match its exact authority link"
COMMITTED = "outcome floor committed anchor does not match its exact Commit link"
INVENTORY = "leader authority recovery-fault inventory is not canonical"
FAULT_SEQ = "leader authority recovery-fault sequences are not canonical"
OUTCOME_BOUND = "cluster outcome is not bound to its exact authority sequence and term"
DECISION_BOUND = "assignment decision is not bound to its exact authority sequence and term"
RELEASE_BOUND = "recovery release commit is not bound to its exact authority sequence, term, and"
