"""Record-level cross-field rules of the leader authority record: LA §3.12
steps 6-11 (the fault inventory, the outcome chain and its floor, the assignment-decision chain
and its floor, the recovery release), and the nested values only they use (LA §3.7 fault slots,
LA §3.8 release references, LA §3.2 `matches_proof`).

`validate.validate_record` runs these after steps 1-5; each rule raises
`checkpoint.validate.ShapeViolation` with the Rust seed's phrase and the one fact that failed.
"""

from __future__ import annotations

import itertools

from laminar_cluster.checkpoint.records import CheckpointScope
from laminar_cluster.checkpoint.validate import validate_outcome_shape
from laminar_cluster.codec import is_sha256_hex
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.fencing import LeaderProof, proof_is_canonical
from laminar_cluster.lease.limits import (
    MAX_RECOVERY_FAULT_SLOTS,
    MAX_RECOVERY_RELEASE_TERMINAL_BYTES,
)
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AuthorityRecoveryFaultSlot,
    AuthorityRecoveryReleaseCommit,
    LeaderAuthorityRecord,
    LeaderLease,
    OutcomeLink,
    RecoveryFaultPublisher,
    RecoveryReleaseId,
    RecoveryReleaseLink,
    RecoveryReleaseTerminalRef,
)
from laminar_cluster.lease.validate_decisions import (
    check_content_address,
    uuid_is_canonical,
    validate_assignment_decision,
)

_INVENTORY = "leader authority recovery-fault inventory is not canonical"
_FAULT_SEQUENCES = "leader authority recovery-fault sequences are not canonical"


def lease_matches_proof(lease: LeaderLease, proof: LeaderProof) -> bool:
    """LA §3.2 `matches_proof`: a canonical proof naming this exact owner and token (LA-5)."""
    return (
        proof_is_canonical(proof)
        and proof.owner == lease.owner.proof_owner()
        and proof.fencing_token == lease.token
    )


def validate_release_id(release: RecoveryReleaseId) -> None:
    """`RecoveryReleaseId.is_canonical` (LA §3.8, LA §8.7; its owning module is not in the seeds):
    interpreted as nonzero protocol version, generation and driver, a canonical non-nil nonce
    and a 64-lowercase-hex round digest. The epoch may be 0 (recovery before any checkpoint)."""
    if release.protocol_version == 0 or release.generation == 0 or release.driver == 0:
        raise ShapeViolation(
            f"recovery release id protocol_version {release.protocol_version}, generation "
            f"{release.generation} and driver {release.driver} must be nonzero"
        )
    if not uuid_is_canonical(release.nonce):
        raise ShapeViolation(
            f"recovery release id nonce {release.nonce!r} is not a canonical non-nil UUID"
        )
    if not is_sha256_hex(release.round_sha256):
        raise ShapeViolation(
            f"recovery release id round_sha256 {release.round_sha256[:80]!r} is not 64 "
            "lowercase hex"
        )


def validate_release_ref(ref: RecoveryReleaseTerminalRef) -> None:
    """LA §3.8: a canonical release id, 64 lowercase hex, 1 <= encoded_len <= 256 KiB."""
    phrase = "recovery release terminal reference is not canonical"
    try:
        validate_release_id(ref.release)
    except ShapeViolation as violation:
        raise ShapeViolation(f"{phrase}: {violation}") from None
    check_content_address(
        f"{phrase}:", ref.sha256, ref.encoded_len, MAX_RECOVERY_RELEASE_TERMINAL_BYTES
    )


def validate_release_commit(commit: AuthorityRecoveryReleaseCommit) -> None:
    validate_release_ref(commit.terminal)
    if not proof_is_canonical(commit.leader_proof):
        raise ShapeViolation("recovery release commit has no canonical leader proof")


def validate_release_link(link: RecoveryReleaseLink) -> None:
    if link.sequence == 0:
        raise ShapeViolation("recovery release authority link has a zero sequence")
    validate_release_ref(link.terminal)


def validate_fault_publisher(publisher: RecoveryFaultPublisher) -> None:
    """LA §8.7 `RecoveryFaultPublisher.validate`: node != 0, boot canonical non-nil, term != 0."""
    participant = publisher.participant
    if (
        participant.node_id == 0
        or not uuid_is_canonical(participant.boot_incarnation)
        or publisher.process_term == 0
    ):
        raise ShapeViolation(
            "recovery fault publisher node, boot, and process term must be nonzero: node "
            f"{participant.node_id}, boot {participant.boot_incarnation!r}, term "
            f"{publisher.process_term}"
        )


def validate_fault_slot(slot: AuthorityRecoveryFaultSlot) -> None:
    validate_fault_publisher(slot.publisher)
    if slot.request_sequence == 0 or slot.fault_sequence == 0:
        raise ShapeViolation(
            "recovery fault request and authority sequence must be nonzero: request "
            f"{slot.request_sequence}, fault {slot.fault_sequence}"
        )


def check_fault_inventory(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 6 (LA-16: fault sequences are admitting sequences, never reused)."""
    slots, revision, seq = (
        record.recovery_fault_slots,
        record.recovery_fault_revision,
        record.lease.seq,
    )
    for earlier, later in itertools.pairwise(slots):
        if earlier.publisher.participant.node_id >= later.publisher.participant.node_id:
            raise ShapeViolation(
                f"{_INVENTORY}: slots are not strictly ascending by node id (node "
                f"{earlier.publisher.participant.node_id} before "
                f"{later.publisher.participant.node_id})"
            )
    if revision == 0 and slots:
        raise ShapeViolation(f"{_INVENTORY}: revision 0 with {len(slots)} slots")
    release_head = record.recovery_release_head
    if revision != 0 and not slots and (release_head is None or release_head.sequence != revision):
        named = "none" if release_head is None else f"sequence {release_head.sequence}"
        raise ShapeViolation(
            f"{_INVENTORY}: revision {revision} with no slots needs the release head at that "
            f"sequence, not {named}"
        )
    if revision > seq:
        raise ShapeViolation(f"{_INVENTORY}: revision {revision} exceeds lease seq {seq}")
    if len(slots) > MAX_RECOVERY_FAULT_SLOTS:
        raise ShapeViolation(
            f"{_INVENTORY}: {len(slots)} slots; maximum is {MAX_RECOVERY_FAULT_SLOTS}"
        )
    fault_sequences: set[int] = set()
    for slot in slots:
        validate_fault_slot(slot)
        fault = slot.fault_sequence
        node = slot.publisher.participant.node_id
        if fault > revision or fault > seq:
            raise ShapeViolation(
                f"{_FAULT_SEQUENCES}: fault_sequence {fault} of node {node} exceeds revision "
                f"{revision} or lease seq {seq}"
            )
        if fault in fault_sequences:
            raise ShapeViolation(f"{_FAULT_SEQUENCES}: fault_sequence {fault} is repeated")
        fault_sequences.add(fault)
    admitted = [
        value is not None
        for value in (
            record.checkpoint_outcome,
            record.assignment_decision,
            record.recovery_release_commit,
        )
    ]
    if sum(admitted) > 1:
        raise ShapeViolation("one authority sequence cannot admit two terminal domains")


def _strictly_older(older: OutcomeLink, newer: OutcomeLink) -> bool:
    return (
        older.sequence < newer.sequence
        and older.epoch < newer.epoch
        and older.checkpoint_id < newer.checkpoint_id
    )


def _outside_sequence(link: OutcomeLink, seq: int) -> bool:
    return link.sequence > seq or link.epoch == 0 or link.checkpoint_id == 0


def check_outcome_chain(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 7 (LA-13: outcome links move strictly backwards; LA-13: the Commit chain is
    carried consistently with the terminal chain)."""
    if record.checkpoint_outcome is not None:
        _check_admitted_outcome(record)
    else:
        if record.previous_outcome is not None or record.previous_commit is not None:
            raise ShapeViolation("non-outcome authority record carries an outcome-chain link")
        if record.outcome_head is not None and _outside_sequence(
            record.outcome_head, record.lease.seq
        ):
            raise ShapeViolation(
                "authority outcome head is outside the durable sequence: sequence "
                f"{record.outcome_head.sequence} at lease seq {record.lease.seq}"
            )
    commit_head, outcome_head = record.commit_head, record.outcome_head
    if commit_head is not None and _outside_sequence(commit_head, record.lease.seq):
        raise ShapeViolation(
            "authority Commit head is outside the durable sequence: sequence "
            f"{commit_head.sequence} at lease seq {record.lease.seq}"
        )
    if commit_head is None:
        return
    if outcome_head is None:
        raise ShapeViolation("authority Commit head exists without terminal continuity")
    older = _strictly_older(commit_head, outcome_head)
    if commit_head != outcome_head and not older:
        raise ShapeViolation("authority Commit head is not ordered behind the terminal head")
    outcome = record.checkpoint_outcome
    if outcome is not None and not outcome.is_commit() and not older:
        raise ShapeViolation("cluster Abort did not preserve a strictly older Commit head")


def _check_admitted_outcome(record: LeaderAuthorityRecord) -> None:
    outcome = record.checkpoint_outcome
    assert outcome is not None  # the caller's branch
    try:
        validate_outcome_shape(outcome, outcome.epoch)
    except ShapeViolation as violation:
        raise ShapeViolation(f"admitted checkpoint outcome is invalid: {violation}") from None
    if outcome.scope is not CheckpointScope.CLUSTER:
        raise ShapeViolation("leader authority can only admit cluster checkpoint outcomes")
    bound = "cluster outcome is not bound to its exact authority sequence and term"
    proof = outcome.leader_proof
    # LA-5: the outcome's proof names exactly the term of the record that admits it.
    if proof is None or not lease_matches_proof(record.lease, proof):
        raise ShapeViolation(f"{bound}: its leader proof does not match the lease")
    link = OutcomeLink(
        sequence=record.lease.seq, epoch=outcome.epoch, checkpoint_id=outcome.checkpoint_id
    )
    if record.outcome_head != link:
        raise ShapeViolation(f"{bound}: outcome_head is not {link}")
    previous = record.previous_outcome
    if previous is not None and not _strictly_older(previous, link):
        raise ShapeViolation("cluster outcome link does not move backward in sequence and epoch")
    floor = record.outcome_floor
    if outcome.is_commit():
        if record.commit_head != link:
            raise ShapeViolation("cluster Commit is not bound to its exact Commit-chain head")
        previous_commit = record.previous_commit
        if previous_commit is not None:
            if not _strictly_older(previous_commit, link):
                raise ShapeViolation(
                    "cluster Commit link does not move backward in sequence and epoch"
                )
            if (
                floor is not None
                and previous_commit.epoch < floor.artifact_before_epoch
                and previous_commit != floor.committed_anchor_link
            ):
                raise ShapeViolation(
                    "cluster Commit link crosses the artifact floor without its exact anchor"
                )
    elif record.previous_commit is not None:
        raise ShapeViolation("cluster Abort carries a previous-Commit link")
    if floor is not None and (
        outcome.deployment_id != floor.deployment_id or outcome.epoch < floor.authority_before_epoch
    ):
        raise ShapeViolation(
            f"cluster outcome is below or outside its durable authority floor: epoch "
            f"{outcome.epoch}, floor {floor.authority_before_epoch}"
        )


def check_outcome_floor_vs_heads(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 8: anchors lie below this record; a head below a floor is that anchor."""
    floor = record.outcome_floor
    if floor is None:
        return
    seq = record.lease.seq
    terminal_link, committed_link = floor.terminal_anchor_link, floor.committed_anchor_link
    if terminal_link is not None and terminal_link.sequence >= seq:
        raise ShapeViolation("outcome floor anchor is outside the authority sequence")
    if committed_link is not None and committed_link.sequence >= seq:
        raise ShapeViolation("outcome floor Commit anchor is outside the authority sequence")
    head = record.outcome_head
    if head is not None:
        if head.epoch < floor.authority_before_epoch and head != terminal_link:
            raise ShapeViolation(
                "authority outcome head does not meet its durable compaction floor"
            )
    elif terminal_link is not None:
        raise ShapeViolation("outcome floor anchor is disconnected from the authority head")
    commit_head = record.commit_head
    if commit_head is not None:
        if commit_head.epoch < floor.artifact_before_epoch and commit_head != committed_link:
            raise ShapeViolation("authority Commit head does not meet its durable artifact floor")
    elif committed_link is not None:
        raise ShapeViolation("outcome floor Commit anchor is disconnected from the Commit head")


def check_assignment_chain(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 9 (LA-15: one decision per target version; versions strictly increase)."""
    decision, seq = record.assignment_decision, record.lease.seq
    head, previous = record.assignment_decision_head, record.previous_assignment_decision
    if decision is None:
        if previous is not None:
            raise ShapeViolation(
                "non-decision authority record carries a previous assignment-decision link"
            )
        if head is not None and (head.sequence > seq or head.target_version == 0):
            raise ShapeViolation(
                "authority assignment-decision head is outside the durable sequence: sequence "
                f"{head.sequence}, target {head.target_version} at lease seq {seq}"
            )
        return
    validate_assignment_decision(decision)
    target = decision.target_version
    floor = record.assignment_decision_floor
    if floor is not None and target < floor.before_target_version:
        raise ShapeViolation(
            f"assignment decision is below its durable authority floor: target {target}, "
            f"floor {floor.before_target_version}"
        )
    bound = "assignment decision is not bound to its exact authority sequence and term"
    # LA-5: the decision's proof names exactly the term of the record that admits it.
    if not lease_matches_proof(record.lease, decision.leader_proof):
        raise ShapeViolation(f"{bound}: its leader proof does not match the lease")
    if head != AssignmentDecisionLink(sequence=seq, target_version=target):
        raise ShapeViolation(f"{bound}: the head is not (sequence {seq}, target {target})")
    if previous is not None and (previous.sequence >= seq or previous.target_version >= target):
        raise ShapeViolation("assignment decision link does not move backward")


def check_assignment_floor_vs_head(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 10: the anchor lies below this record; a head below the floor is it."""
    floor = record.assignment_decision_floor
    if floor is None:
        return
    link = floor.terminal_anchor_link
    if link is not None and link.sequence >= record.lease.seq:
        raise ShapeViolation("assignment decision floor anchor is outside the authority sequence")
    head = record.assignment_decision_head
    if head is not None:
        if head.target_version < floor.before_target_version and head != link:
            raise ShapeViolation(
                "authority assignment-decision head does not meet its durable floor"
            )
    elif link is not None:
        raise ShapeViolation(
            "assignment decision floor anchor is disconnected from the authority head"
        )


def check_recovery_release(record: LeaderAuthorityRecord) -> None:
    """LA §3.12 step 11 (LA-16: a release commits only a settled inventory, at its own sequence)."""
    seq, head = record.lease.seq, record.recovery_release_head
    any_active = any(slot.active for slot in record.recovery_fault_slots)
    commit = record.recovery_release_commit
    if commit is not None:
        validate_release_commit(commit)
        bound = (
            "recovery release commit is not bound to its exact authority sequence, term, and "
            "settled fault inventory"
        )
        if not lease_matches_proof(record.lease, commit.leader_proof):
            raise ShapeViolation(f"{bound}: its leader proof does not match the lease")
        if head != RecoveryReleaseLink(sequence=seq, terminal=commit.terminal):
            raise ShapeViolation(f"{bound}: the release head is not this sequence and terminal")
        if record.recovery_fault_revision != seq:
            raise ShapeViolation(
                f"{bound}: revision {record.recovery_fault_revision} is not sequence {seq}"
            )
        if any_active:
            raise ShapeViolation(f"{bound}: a fault slot is still active")
        return
    if head is None:
        return
    validate_release_link(head)
    if head.sequence >= seq:
        raise ShapeViolation(
            f"recovery release head is outside the durable authority sequence: sequence "
            f"{head.sequence} at lease seq {seq}"
        )
    if not any_active and record.recovery_fault_revision != head.sequence:
        raise ShapeViolation(
            "settled recovery fault inventory is not bound to its release head: revision "
            f"{record.recovery_fault_revision}, release head sequence {head.sequence}"
        )
