"""Assignment digests and the fence built from an owner map (AS §2.2, AS §2.4, AS §2.13).

All integers are little-endian; UUIDs are their 16 RFC-4122 bytes. Our
`CheckpointAssignmentFence` has no `partitioning_abi_version` field (the record is shared with
finished checkpoint code), so the ABI enters both digests as the constant PARTITIONING_ABI_VERSION
= 1, which keeps the AS §2.13 reference vectors (tests/assignment/test_digest.py, RB-T16).
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.vnode import MAX_VNODE_COUNT
from laminar_cluster.codec import digest32, digest32_bytes
from laminar_cluster.codec.memo import pure_memo
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.fencing import (
    MAX_CHECKPOINT_PARTICIPANTS,
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderProof,
    fence_is_canonical,
)
from laminar_cluster.lease.records import AssignmentDrainTransition

PARTITIONING_ABI_VERSION: Final = 1
OWNER_MAP_DOMAIN: Final = b"laminardb-vnode-owner-map-v2\0"
FENCE_DOMAIN: Final = b"laminardb-checkpoint-assignment-v3\0"
TRANSITION_DOMAIN: Final = b"laminardb-assignment-drain-transition-v1\0"
SHA256_BYTES: Final = 32


@pure_memo(512)  # pure, and the same few maps recur at every poll (a list bypasses it)
def owner_map_digest(vnode_count: int, owners: Sequence[int]) -> bytes:
    """SHA256(domain ‖ abi:u16 ‖ vnode_count:u32 ‖ len:u64 ‖ owner:u64 …) (AS §2.2)."""
    hasher = hashlib.sha256(OWNER_MAP_DOMAIN)
    hasher.update(struct.pack("<HIQ", PARTITIONING_ABI_VERSION, vnode_count, len(owners)))
    for owner in owners:
        hasher.update(struct.pack("<Q", owner))
    return hasher.digest()


@pure_memo(512)
def fence_digest(fence: CheckpointAssignmentFence) -> bytes:
    """SHA256(domain ‖ version:u64 ‖ abi:u16 ‖ vnode_count:u32 ‖ digest(32) ‖ len:u64 ‖
    (node:u64 ‖ boot(16))…) (AS §2.2)."""
    hasher = hashlib.sha256(FENCE_DOMAIN)
    hasher.update(
        struct.pack("<QHI", fence.assignment_version, PARTITIONING_ABI_VERSION, fence.vnode_count)
    )
    hasher.update(digest32_bytes(fence.assignment_digest))
    hasher.update(struct.pack("<Q", len(fence.participants)))
    for participant in fence.participants:
        hasher.update(struct.pack("<Q", participant.node_id))
        hasher.update(uuid.UUID(participant.boot_incarnation).bytes)
    return hasher.digest()


def proof_bytes(proof: LeaderProof) -> bytes:
    owner = proof.owner
    return (
        struct.pack("<Q", owner.node_id)
        + uuid.UUID(owner.boot_id).bytes
        + struct.pack("<QQ", owner.process_term, proof.fencing_token)
    )


def transition_digest(transition: AssignmentDrainTransition) -> bytes:
    """SHA256(domain ‖ predecessor.digest ‖ target.digest ‖ node ‖ boot ‖ term ‖ token)
    (AS §2.4)."""
    hasher = hashlib.sha256(TRANSITION_DOMAIN)
    hasher.update(fence_digest(transition.predecessor))
    hasher.update(fence_digest(transition.target))
    hasher.update(proof_bytes(transition.leader))
    return hasher.digest()


@dataclass(frozen=True, slots=True)
class AssignmentDrainId:
    """The compact identity of one drain round (AS §2.4), carried by source commands/receipts."""

    predecessor_version: int
    target_version: int
    digest: bytes

    def is_canonical(self) -> bool:
        return (
            self.predecessor_version != 0
            and self.target_version == self.predecessor_version + 1
            and len(self.digest) == SHA256_BYTES
            and any(self.digest)
        )


def drain_id(transition: AssignmentDrainTransition) -> AssignmentDrainId:
    return AssignmentDrainId(
        predecessor_version=transition.predecessor.assignment_version,
        target_version=transition.target.assignment_version,
        digest=transition_digest(transition),
    )


def required_participants(transition: AssignmentDrainTransition) -> tuple[FenceParticipant, ...]:
    """The drain's ack quorum: the predecessor's participants; target-only joiners never
    (AS §2.4)."""
    return transition.predecessor.participants


@pure_memo(512)
def fence_from_owner_map(
    version: int, owners: Sequence[int], participants: Sequence[FenceParticipant]
) -> CheckpointAssignmentFence:
    """The canonical fence of `owners` (AS §2.2 `from_owner_map`); ShapeViolation otherwise.

    The owner-id set must equal the participant-id set exactly, so owner 0 is impossible.
    """
    if len(participants) > MAX_CHECKPOINT_PARTICIPANTS:
        raise ShapeViolation(
            f"assignment has {len(participants)} participants; maximum is "
            f"{MAX_CHECKPOINT_PARTICIPANTS}"
        )
    if not 1 <= len(owners) <= MAX_VNODE_COUNT:
        raise ShapeViolation(
            f"assignment vnode count {len(owners)} is outside 1..={MAX_VNODE_COUNT}"
        )
    fence = CheckpointAssignmentFence(
        assignment_version=version,
        vnode_count=len(owners),
        assignment_digest=digest32(owner_map_digest(len(owners), owners)),
        participants=tuple(participants),
    )
    if not fence_is_canonical(fence):
        raise ShapeViolation(
            f"assignment fence of version {version} is not canonical (version nonzero, "
            "participants non-empty, strictly ascending, with canonical boots)"
        )
    owner_ids, participant_ids = set(owners), {p.node_id for p in participants}
    if owner_ids != participant_ids:
        raise ShapeViolation(
            f"assignment owner set {sorted(owner_ids)[:8]} is not its participant set "
            f"{sorted(participant_ids)[:8]}"
        )
    return fence


def fence_matches_owner_map(fence: CheckpointAssignmentFence, owners: Sequence[int]) -> bool:
    """AS §2.2 `matches_owner_map`: same length, same digest, owner-id set == participant set."""
    return (
        fence.vnode_count == len(owners)
        and digest32_bytes(fence.assignment_digest) == owner_map_digest(len(owners), owners)
        and set(owners) == {p.node_id for p in fence.participants}
    )
