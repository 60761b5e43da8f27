"""Fencing: what makes a superseded actor's writes lose (docs/glossary.md "fence").

Every layer carries these: a leader's proof of authority (`LeaderProof`: its exact incarnation
and fencing token, checked against the head of the lease's log before a decision is admitted),
and the assignment a cluster checkpoint is fenced by (`CheckpointAssignmentFence`: version,
shape and the exact roster of participant incarnations), so that a checkpoint of a superseded
assignment or a deposed leader can never commit. They sit below every protocol that stores them.
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.codec import U32, U64, Digest32, Record
from laminar_cluster.codec.shape import ShapeViolation, canonical_uuid

# The most participants a checkpoint fence names (CD §3).
MAX_CHECKPOINT_PARTICIPANTS: Final = 129


class LeaderOwner(Record):
    """One exact leader incarnation: node, boot and process term."""

    node_id: U64
    boot_id: str
    process_term: U64


class LeaderProof(Record):
    """A leader's proof of authority: its exact incarnation and fencing token."""

    owner: LeaderOwner
    fencing_token: U64


class FenceParticipant(Record):
    """One participant of a fence: a node and the boot incarnation it ran as."""

    node_id: U64
    boot_incarnation: str


class CheckpointAssignmentFence(Record):
    """The assignment a cluster checkpoint was taken under: version, shape, exact roster."""

    assignment_version: U64
    vnode_count: U32
    assignment_digest: Digest32
    participants: tuple[FenceParticipant, ...]

    def participant_incarnation(self, node_id: int) -> str | None:
        for participant in self.participants:
            if participant.node_id == node_id:
                return participant.boot_incarnation
        return None


def proof_is_canonical(proof: LeaderProof) -> bool:
    """Nonzero node, process term and token, and a canonical boot UUID."""
    owner = proof.owner
    try:
        canonical_uuid(owner.boot_id, "leader boot id")
    except ShapeViolation:
        return False
    return owner.node_id != 0 and owner.process_term != 0 and proof.fencing_token != 0


def fence_is_canonical(fence: CheckpointAssignmentFence) -> bool:
    """Nonzero version, shape and digest; 1 to MAX_CHECKPOINT_PARTICIPANTS participants in
    strictly increasing node order, each with a canonical boot UUID."""
    if fence.assignment_version == 0 or fence.vnode_count == 0 or not any(fence.assignment_digest):
        return False
    if not 1 <= len(fence.participants) <= MAX_CHECKPOINT_PARTICIPANTS:
        return False
    previous = 0
    for participant in fence.participants:
        if participant.node_id <= previous:
            return False
        previous = participant.node_id
        try:
            canonical_uuid(participant.boot_incarnation, "boot incarnation")
        except ShapeViolation:
            return False
    return True
