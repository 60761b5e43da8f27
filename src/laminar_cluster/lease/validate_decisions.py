"""Validation of the leader authority's decisions and retention floors.

Spec sections: LA §3.6 (assignment decision validity: drain and recovery, the removed-process
fences), LA §8.2 (ProcessLeaseFence canonicality), LA §3.12 steps 3-5 (outcome links, the outcome
floor, the assignment-decision floor), with RB §2.4 (drain transition canonicality), RB §2.5 (the
drain handoff checkpoint: present iff Commit) and RB §2.6 (AssignmentSnapshotRef, the recovery
checkpoint). `validate.py` runs these from `validate_record` and re-exports the public names.

Every rule raises `checkpoint.validate.ShapeViolation`; the message starts with the Rust seed's
phrase for the rule (tests and operators grep for it) and ends with the one fact that failed.
"""

from __future__ import annotations

from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    RecoveryCapsuleRef,
)
from laminar_cluster.checkpoint.validate import validate_capsule_ref, validate_outcome_shape
from laminar_cluster.codec import is_sha256_hex
from laminar_cluster.codec.shape import ShapeViolation, canonical_uuid
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    fence_is_canonical,
    proof_is_canonical,
)
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    AuthorityAssignmentDecision,
    AuthorityAssignmentDecisionFloor,
    AuthorityOutcomeFloor,
    OutcomeLink,
    ProcessLease,
    ProcessLeaseFence,
)

# RB §2.6: a staged proposal is an assignment snapshot of version >= 2, <= 8 MiB.
MIN_ASSIGNMENT_SNAPSHOT_REF_VERSION = 2
MAX_ASSIGNMENT_SNAPSHOT_BYTES = 8_388_608

_DRAIN = "assignment drain decision is not canonical"
_RECOVERY = "assignment recovery decision is not a canonical successor"
_REMOVED_SET = "assignment recovery decision requires the exact removed predecessor process set"
_REMOVED_FENCES = "assignment recovery process fences are incomplete, unsorted, or unrelated"
_FLOOR = "outcome floor requires a canonical deployment and ordered authority/artifact horizons"
_TERMINAL_ANCHOR = "outcome floor terminal anchor does not match its exact authority link"
_COMMITTED_ANCHOR = "outcome floor committed anchor does not match its exact Commit link"
_DECISION_ANCHOR = "assignment decision floor anchor does not match its exact authority link"


def uuid_is_canonical(value: str) -> bool:
    """A canonical (lowercase, hyphenated) non-nil UUID string."""
    try:
        canonical_uuid(value, "uuid")
    except ShapeViolation:
        return False
    return True


def process_lease_problem(lease: ProcessLease, node: int) -> str | None:
    """LA §8.2 `ProcessLease.validate(node)`: the node matches and is nonzero, the owner is a
    canonical non-nil UUID, term and seq are nonzero. None when valid."""
    if lease.node == 0 or lease.node != node:
        return f"process lease node {lease.node} is not the nonzero node {node}"
    if not uuid_is_canonical(lease.owner):
        return f"process lease owner {lease.owner!r} is not a canonical non-nil UUID"
    if lease.term == 0 or lease.seq == 0:
        return f"process lease term {lease.term} and seq {lease.seq} must be nonzero"
    return None


def process_fence_problem(fence: ProcessLeaseFence) -> str | None:
    """LA §8.2: both leases valid for the predecessor's node, different owners, and the successor
    exactly one seq and one term after the predecessor (an immediate takeover). None if so."""
    predecessor, successor = fence.predecessor, fence.successor
    problem = process_lease_problem(predecessor, predecessor.node) or process_lease_problem(
        successor, predecessor.node
    )
    if problem is not None:
        return problem
    if predecessor.owner == successor.owner:
        return f"process fence of node {predecessor.node} has one owner on both sides"
    if successor.seq != predecessor.seq + 1 or successor.term != predecessor.term + 1:
        return (
            f"process fence of node {predecessor.node} goes from (seq {predecessor.seq}, term "
            f"{predecessor.term}) to (seq {successor.seq}, term {successor.term}), not +1 each"
        )
    return None


def process_fence_is_canonical(fence: ProcessLeaseFence) -> bool:
    return process_fence_problem(fence) is None


def _successor_problem(
    predecessor: CheckpointAssignmentFence, target: CheckpointAssignmentFence
) -> str | None:
    if not fence_is_canonical(predecessor) or not fence_is_canonical(target):
        return "a fence is not canonical"
    if predecessor.vnode_count != target.vnode_count:
        return f"vnode count changes from {predecessor.vnode_count} to {target.vnode_count}"
    if target.assignment_version != predecessor.assignment_version + 1:
        return (
            f"target version {target.assignment_version} is not predecessor version "
            f"{predecessor.assignment_version} + 1"
        )
    return None


def drain_transition_problem(transition: AssignmentDrainTransition) -> str | None:
    """RB §2.4: canonical fences and proof, same vnode count, target = predecessor
    + 1, and the leader's (node, boot) a participant of either fence. None when canonical."""
    problem = _successor_problem(transition.predecessor, transition.target)
    if problem is not None:
        return f"transition: {problem}"
    leader = transition.leader
    if not proof_is_canonical(leader):
        return "transition leader proof is not canonical"
    node, boot = leader.owner.node_id, leader.owner.boot_id
    if boot not in (
        transition.predecessor.participant_incarnation(node),
        transition.target.participant_incarnation(node),
    ):
        return f"transition leader node {node} boot {boot} is in neither fence"
    return None


def drain_transition_is_canonical(transition: AssignmentDrainTransition) -> bool:
    return drain_transition_problem(transition) is None


def check_content_address(what: str, sha256: str, encoded_len: int, max_bytes: int) -> None:
    """A content-addressed reference names 64 lowercase hex and a length in 1..=`max_bytes`."""
    if not is_sha256_hex(sha256):
        raise ShapeViolation(f"{what} sha256 {sha256[:80]!r} is not 64 lowercase hex")
    if not 1 <= encoded_len <= max_bytes:
        raise ShapeViolation(f"{what} encoded_len {encoded_len} is outside 1..={max_bytes}")


def validate_snapshot_ref(ref: AssignmentSnapshotRef) -> None:
    """RB §2.6: version >= 2, 64 lowercase hex, encoded_len 1..=8 MiB."""
    if ref.version < MIN_ASSIGNMENT_SNAPSHOT_REF_VERSION:
        raise ShapeViolation(f"assignment snapshot reference version {ref.version} is below 2")
    check_content_address(
        "assignment snapshot reference", ref.sha256, ref.encoded_len, MAX_ASSIGNMENT_SNAPSHOT_BYTES
    )


def checkpoint_ref_problem(ref: RecoveryCapsuleRef) -> str | None:
    """RB §2.5/RB §2.6 `CommittedCheckpointRef` validity (our `RecoveryCapsuleRef`): a
    canonical attempt (epoch == checkpoint_id != 0), 64 lowercase hex, a length in
    1..=MAX_RECOVERY_CAPSULE_BYTES. None when valid."""
    try:
        validate_capsule_ref(ref)
    except ShapeViolation as violation:
        return str(violation)
    return None


def validate_drain_decision(decision: AssignmentDrainDecision) -> None:
    """LA §3.12 "Decision validation": canonical transition and proof; Commit only by the term
    that opened the transition (LA-15: a replacement term may Abort, never Commit); a canonical
    handoff checkpoint iff Commit (RB §2.5)."""
    problem = drain_transition_problem(decision.transition)
    if problem is not None:
        raise ShapeViolation(f"{_DRAIN}: {problem}")
    if not proof_is_canonical(decision.leader_proof):
        raise ShapeViolation(f"{_DRAIN}: leader proof is not canonical")
    # LA-15: only the exact term that created the transition may commit it.
    commit = decision.verdict is AssignmentVerdict.COMMIT
    if commit and decision.leader_proof != decision.transition.leader:
        raise ShapeViolation(f"{_DRAIN}: a Commit requires leader_proof == transition.leader")
    # RB §2.5: the handoff checkpoint is present iff the verdict is Commit.
    handoff = decision.handoff_checkpoint
    if commit and handoff is None:
        raise ShapeViolation(f"{_DRAIN}: a Commit requires a handoff checkpoint")
    if not commit and handoff is not None:
        raise ShapeViolation(f"{_DRAIN}: an Abort carries no handoff checkpoint")
    if handoff is not None:
        problem = checkpoint_ref_problem(handoff)
        if problem is not None:
            raise ShapeViolation(f"{_DRAIN}: handoff checkpoint: {problem}")


def validate_recovery_decision(decision: AssignmentRecoveryDecision) -> None:
    """LA §3.6: a canonical successor with an admitted-proposal ref and a canonical recovery
    checkpoint (RB §2.6), and exactly one canonical process fence per removed
    predecessor participant, in predecessor order."""
    predecessor, target = decision.predecessor, decision.target
    problem = _successor_problem(predecessor, target)
    if problem is None and not proof_is_canonical(decision.leader_proof):
        problem = "leader proof is not canonical"
    if problem is None:
        try:
            validate_snapshot_ref(decision.proposal)
        except ShapeViolation as violation:
            problem = f"proposal: {violation}"
    if problem is None and decision.proposal.version != target.assignment_version:
        problem = (
            f"proposal version {decision.proposal.version} is not target version "
            f"{target.assignment_version}"
        )
    if problem is None and decision.recovery_checkpoint is not None:  # None: initial state
        ref_problem = checkpoint_ref_problem(decision.recovery_checkpoint)
        if ref_problem is not None:
            problem = f"recovery checkpoint: {ref_problem}"
    if problem is not None:
        raise ShapeViolation(f"{_RECOVERY}: {problem}")
    removed = [
        p
        for p in predecessor.participants
        if target.participant_incarnation(p.node_id) != p.boot_incarnation
    ]
    fences = decision.removed_process_fences
    if not removed or len(removed) != len(fences):
        raise ShapeViolation(
            f"{_REMOVED_SET}: {len(removed)} predecessor processes are removed, "
            f"{len(fences)} process fences are given"
        )
    for index, (participant, fence) in enumerate(zip(removed, fences, strict=True)):
        fence_problem = process_fence_problem(fence)
        if fence_problem is None and (
            fence.predecessor.node != participant.node_id
            or fence.predecessor.owner != participant.boot_incarnation
        ):
            fence_problem = (
                f"fence names node {fence.predecessor.node} boot {fence.predecessor.owner}, "
                f"removed process is node {participant.node_id} boot "
                f"{participant.boot_incarnation}"
            )
        if fence_problem is not None:
            raise ShapeViolation(f"{_REMOVED_FENCES}: fence {index}: {fence_problem}")


def validate_assignment_decision(decision: AuthorityAssignmentDecision) -> None:
    if isinstance(decision, AssignmentDrainDecision):
        validate_drain_decision(decision)
    else:
        validate_recovery_decision(decision)


def validate_outcome_link(link: OutcomeLink, field: str) -> None:
    """LA §3.12 step 3: a nonzero sequence and a canonical attempt (epoch == checkpoint_id != 0)."""
    attempt = CheckpointAttempt(epoch=link.epoch, checkpoint_id=link.checkpoint_id)
    if link.sequence == 0 or not attempt.is_canonical():
        raise ShapeViolation(
            "checkpoint outcome link requires a nonzero authority sequence and one canonical "
            f"checkpoint ID: {field} is (sequence {link.sequence}, epoch {link.epoch}, "
            f"checkpoint_id {link.checkpoint_id})"
        )


def _link_names(link: OutcomeLink, outcome: CheckpointOutcome) -> bool:
    return (link.epoch, link.checkpoint_id) == (outcome.epoch, outcome.checkpoint_id)


def validate_outcome_floor(floor: AuthorityOutcomeFloor) -> None:
    """LA §3.12 step 4: the floor is self-consistent (LA-14: anchors by value keep continuity)."""
    try:
        canonical_uuid(floor.deployment_id, "deployment_id")
    except ShapeViolation as violation:
        raise ShapeViolation(f"{_FLOOR}: {violation}") from None
    if floor.authority_before_epoch == 0:
        raise ShapeViolation(f"{_FLOOR}: authority_before_epoch is 0")
    if floor.artifact_before_epoch > floor.authority_before_epoch:
        raise ShapeViolation(
            f"{_FLOOR}: artifact_before_epoch {floor.artifact_before_epoch} exceeds "
            f"authority_before_epoch {floor.authority_before_epoch}"
        )
    for link, field in (
        (floor.terminal_anchor_link, "terminal_anchor_link"),
        (floor.committed_anchor_link, "committed_anchor_link"),
    ):
        if link is not None:
            validate_outcome_link(link, f"outcome floor {field}")
    for anchor, name in (
        (floor.terminal_anchor, "terminal"),
        (floor.committed_anchor, "committed"),
    ):
        if anchor is None:
            continue
        try:
            validate_outcome_shape(anchor, anchor.epoch)
        except ShapeViolation as violation:
            raise ShapeViolation(
                f"outcome floor has an invalid {name} anchor: {violation}"
            ) from None
        if anchor.scope is not CheckpointScope.CLUSTER:
            raise ShapeViolation(f"outcome floor has an invalid {name} anchor: scope is local")
        if anchor.deployment_id != floor.deployment_id:
            raise ShapeViolation(
                f"outcome floor has an invalid {name} anchor: deployment {anchor.deployment_id} "
                f"is not the floor's {floor.deployment_id}"
            )
    _check_anchor_links(floor)
    _check_anchor_order(floor)


def _check_anchor_links(floor: AuthorityOutcomeFloor) -> None:
    terminal, terminal_link = floor.terminal_anchor, floor.terminal_anchor_link
    if (terminal is None) != (terminal_link is None):
        raise ShapeViolation(f"{_TERMINAL_ANCHOR}: only one of anchor and link is present")
    if terminal is not None and terminal_link is not None:
        if terminal.epoch >= floor.authority_before_epoch:
            raise ShapeViolation(
                f"{_TERMINAL_ANCHOR}: anchor epoch {terminal.epoch} is not below "
                f"authority_before_epoch {floor.authority_before_epoch}"
            )
        if not _link_names(terminal_link, terminal):
            raise ShapeViolation(f"{_TERMINAL_ANCHOR}: the link names another attempt")
    committed, committed_link = floor.committed_anchor, floor.committed_anchor_link
    if (committed is None) != (committed_link is None):
        raise ShapeViolation(f"{_COMMITTED_ANCHOR}: only one of anchor and link is present")
    if committed is not None and committed_link is not None:
        if floor.artifact_before_epoch == 0:
            raise ShapeViolation(f"{_COMMITTED_ANCHOR}: artifact_before_epoch is 0")
        if not committed.is_commit():
            raise ShapeViolation(f"{_COMMITTED_ANCHOR}: the anchor is not a Commit")
        if committed.epoch >= floor.artifact_before_epoch:
            raise ShapeViolation(
                f"{_COMMITTED_ANCHOR}: anchor epoch {committed.epoch} is not below "
                f"artifact_before_epoch {floor.artifact_before_epoch}"
            )
        if not _link_names(committed_link, committed):
            raise ShapeViolation(f"{_COMMITTED_ANCHOR}: the link names another attempt")


def _check_anchor_order(floor: AuthorityOutcomeFloor) -> None:
    committed, terminal = floor.committed_anchor, floor.terminal_anchor
    if committed is None:
        return
    if terminal is None:
        raise ShapeViolation("outcome floor has a committed anchor without terminal continuity")
    if committed.epoch == terminal.epoch:
        ordered = committed == terminal
    else:
        ordered = committed.epoch < terminal.epoch and committed.checkpoint_id < (
            terminal.checkpoint_id
        )
    if not ordered:
        raise ShapeViolation(
            f"outcome floor anchors are not monotonically ordered: committed epoch "
            f"{committed.epoch}, terminal epoch {terminal.epoch}"
        )
    committed_link, terminal_link = floor.committed_anchor_link, floor.terminal_anchor_link
    assert committed_link is not None and terminal_link is not None  # checked by the caller
    if committed == terminal:
        links_ordered = committed_link == terminal_link
    else:
        links_ordered = committed_link.sequence < terminal_link.sequence
    if not links_ordered:
        raise ShapeViolation(
            f"outcome floor anchor links are not ordered with their exact outcomes: committed "
            f"link sequence {committed_link.sequence}, terminal link sequence "
            f"{terminal_link.sequence}"
        )


def validate_assignment_floor(floor: AuthorityAssignmentDecisionFloor) -> None:
    """LA §3.12 step 5: before != 0; anchor and link together, the anchor valid, below the floor,
    and named exactly by its link."""
    if floor.before_target_version == 0:
        raise ShapeViolation("assignment decision floor requires a nonzero target version")
    anchor, link = floor.terminal_anchor, floor.terminal_anchor_link
    if (anchor is None) != (link is None):
        raise ShapeViolation("assignment decision floor has an incomplete terminal anchor")
    if anchor is None or link is None:
        return
    try:
        validate_assignment_decision(anchor)
    except ShapeViolation as violation:
        raise ShapeViolation(f"assignment decision floor anchor is invalid: {violation}") from None
    _check_decision_anchor_link(floor, anchor, link)


def _check_decision_anchor_link(
    floor: AuthorityAssignmentDecisionFloor,
    anchor: AuthorityAssignmentDecision,
    link: AssignmentDecisionLink,
) -> None:
    if link.sequence == 0:
        raise ShapeViolation(f"{_DECISION_ANCHOR}: link sequence is 0")
    if link.target_version != anchor.target_version:
        raise ShapeViolation(
            f"{_DECISION_ANCHOR}: link target {link.target_version} is not anchor target "
            f"{anchor.target_version}"
        )
    if anchor.target_version >= floor.before_target_version:
        raise ShapeViolation(
            f"{_DECISION_ANCHOR}: anchor target {anchor.target_version} is not below "
            f"{floor.before_target_version}"
        )
