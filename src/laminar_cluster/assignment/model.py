"""Validation and constructors of assignment snapshots (AS §2.3, AS §2.4, AS §2.11).

Pure functions. Every rule raises `checkpoint.validate.ShapeViolation`; callers wrap them in
`writing(...)` (InvalidArgument) before a write and `reading(key)` (CorruptRecord) after a read.
`now_ms` is passed in by the caller (from its Clock), so these stay deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from laminar_cluster.assignment.digest import (
    fence_from_owner_map,
    fence_matches_owner_map,
    transition_digest,
)
from laminar_cluster.assignment.records import AssignmentSnapshot, DrainFinalization
from laminar_cluster.codec import digest32, digest32_bytes
from laminar_cluster.codec.memo import pure_memo
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.lease.validate_decisions import drain_transition_problem


def owners_from_vnode_map(vnodes: Mapping[int, int]) -> tuple[int, ...]:
    """The dense owner list of a `vnode -> owner` map with keys exactly 0..n-1 (AS §2.3 rule 4)."""
    if sorted(vnodes) != list(range(len(vnodes))):
        raise ShapeViolation(f"assignment vnode keys are not exactly 0..{len(vnodes) - 1}")
    return tuple(vnodes[index] for index in range(len(vnodes)))


def snapshot_fence(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence:
    """The assignment certificate of `snapshot` (AS §2.3 `assignment_fence`, rules 1-7)."""
    if snapshot.assignment_version == 0:
        raise ShapeViolation("assignment snapshot version must be nonzero")
    return fence_from_owner_map(snapshot.assignment_version, snapshot.owners, snapshot.participants)


@pure_memo(512)  # the same heads are validated at every poll
def validate_snapshot(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence:
    """AS §2.3 `validate` (rules 1-9); returns the snapshot's fence."""
    fence = snapshot_fence(snapshot)
    transition = snapshot.drain_transition
    if snapshot.draining != (transition is not None):
        raise ShapeViolation(
            f"assignment snapshot {snapshot.assignment_version}: draining={snapshot.draining} "
            "requires a drain transition exactly when draining"
        )
    if transition is not None:
        problem = drain_transition_problem(transition)
        if problem is not None:
            raise ShapeViolation(f"assignment drain transition is not canonical: {problem}")
        if transition.target != fence:
            raise ShapeViolation("assignment drain transition target is not the snapshot's fence")
    return fence


def to_vnode_vec(snapshot: AssignmentSnapshot, vnode_count: int) -> list[int]:
    """The dense owner list, requiring exactly `vnode_count` vnodes (AS §2.3)."""
    validate_snapshot(snapshot)
    if len(snapshot.owners) != vnode_count:
        raise ShapeViolation(
            f"assignment has {len(snapshot.owners)} vnodes; expected {vnode_count}"
        )
    return list(snapshot.owners)


def next_for_participants(
    current: AssignmentSnapshot,
    owners: Sequence[int],
    participants: Sequence[FenceParticipant],
    *,
    now_ms: int,
) -> AssignmentSnapshot:
    """The committed generation version + 1 with `owners` and `participants` (AS §2.3)."""
    following = AssignmentSnapshot(
        version=1,
        assignment_version=current.assignment_version + 1,
        owners=tuple(owners),
        participants=tuple(participants),
        updated_at_ms=now_ms,
        draining=False,
        drain_transition=None,
    )
    validate_snapshot(following)
    return following


def next_draining(
    current: AssignmentSnapshot,
    owners: Sequence[int],
    participants: Sequence[FenceParticipant],
    leader_proof: LeaderProof,
    *,
    now_ms: int,
) -> AssignmentSnapshot:
    """The draining generation version + 1 whose transition binds current -> target (AS §2.3)."""
    predecessor = validate_snapshot(current)
    if current.draining:
        raise ShapeViolation("next_draining requires a committed current snapshot")
    target = next_for_participants(current, owners, participants, now_ms=now_ms)
    transition = AssignmentDrainTransition(
        predecessor=predecessor, target=snapshot_fence(target), leader=leader_proof
    )
    draining = _replace(target, draining=True, drain_transition=transition)
    validate_snapshot(draining)
    return draining


def committed_target(draining: AssignmentSnapshot, *, now_ms: int) -> AssignmentSnapshot:
    """The Commit terminal of a draining generation: same version and map, not draining."""
    validate_snapshot(draining)
    if not draining.draining:
        raise ShapeViolation("committed_target requires a draining snapshot")
    return _replace(draining, draining=False, drain_transition=None, updated_at_ms=now_ms)


def aborted_target(
    draining: AssignmentSnapshot, predecessor: AssignmentSnapshot, *, now_ms: int
) -> AssignmentSnapshot:
    """The Abort terminal: the predecessor's vnodes and roster at the draining version (AS §2.3)."""
    validate_snapshot(draining)
    fence = validate_snapshot(predecessor)
    transition = draining.drain_transition
    if transition is None or predecessor.draining:
        raise ShapeViolation("aborted_target requires a draining snapshot and a committed one")
    if fence != transition.predecessor:
        raise ShapeViolation("aborted_target predecessor is not the transition's predecessor")
    if draining.assignment_version != predecessor.assignment_version + 1:
        raise ShapeViolation("aborted_target predecessor is not the draining version - 1")
    return _replace(
        predecessor, assignment_version=draining.assignment_version, updated_at_ms=now_ms
    )


def validate_finalization(
    finalization: DrainFinalization, draining: AssignmentSnapshot
) -> AssignmentSnapshot:
    """AS §2.11 finalize_drain step 1: bound to `draining` by digest; the proposal is committed, of
    the same version, and either the transition's target (Commit) or its rollback (Abort)."""
    validate_snapshot(draining)
    transition = draining.drain_transition
    if transition is None:
        raise ShapeViolation("a drain finalization requires a draining snapshot")
    if digest32_bytes(finalization.transition_digest) != transition_digest(transition):
        raise ShapeViolation("drain finalization transition digest does not bind the draining")
    proposal = finalization.proposal
    fence = validate_snapshot(proposal)
    if proposal.draining or proposal.assignment_version != draining.assignment_version:
        raise ShapeViolation("drain finalization proposal must be committed at the same version")
    if fence != transition.target and not is_rollback(fence, transition):
        raise ShapeViolation(
            "drain finalization proposal is neither the transition's target nor its rollback"
        )
    return proposal


def is_rollback(fence: CheckpointAssignmentFence, transition: AssignmentDrainTransition) -> bool:
    """Whether `fence` is the Abort rollback of `transition`: the target's version with the
    predecessor's vnode count, owner-map digest and participants (AS §2.11)."""
    predecessor = transition.predecessor
    return (
        fence.assignment_version == transition.target.assignment_version
        and fence.vnode_count == predecessor.vnode_count
        and fence.assignment_digest == predecessor.assignment_digest
        and fence.participants == predecessor.participants
    )


def new_finalization(
    draining: AssignmentSnapshot, proposal: AssignmentSnapshot
) -> DrainFinalization:
    transition = draining.drain_transition
    if transition is None:
        raise ShapeViolation("finalize_drain requires a draining snapshot")
    finalization = DrainFinalization(
        version=1, transition_digest=digest32(transition_digest(transition)), proposal=proposal
    )
    validate_finalization(finalization, draining)
    return finalization


def matches_owner_map(snapshot: AssignmentSnapshot, owners: Sequence[int]) -> bool:
    return fence_matches_owner_map(snapshot_fence(snapshot), owners)


def _replace(snapshot: AssignmentSnapshot, **changes: object) -> AssignmentSnapshot:
    return msgspec.structs.replace(snapshot, **changes)
