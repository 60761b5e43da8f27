"""Builders for assignment snapshot store tests (boots are UUID(int=node*11), as in AS §2.13)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from laminar_cluster.assignment.model import next_draining, validate_snapshot
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.fencing import FenceParticipant, LeaderOwner, LeaderProof
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentVerdict,
)


def participant(node: int, boot: int | None = None) -> FenceParticipant:
    return FenceParticipant(node_id=node, boot_incarnation=str(uuid.UUID(int=boot or node * 11)))


def proof(node: int = 1, *, token: int = 1) -> LeaderProof:
    return LeaderProof(
        owner=LeaderOwner(node_id=node, boot_id=str(uuid.UUID(int=node * 11)), process_term=1),
        fencing_token=token,
    )


def snapshot(
    version: int, owners: Sequence[int], *, at_ms: int = 1_000, boots: dict[int, int] | None = None
) -> AssignmentSnapshot:
    boots = boots or {}
    value = AssignmentSnapshot(
        version=1,
        assignment_version=version,
        owners=tuple(owners),
        participants=tuple(participant(n, boots.get(n)) for n in sorted(set(owners))),
        updated_at_ms=at_ms,
        draining=False,
        drain_transition=None,
    )
    validate_snapshot(value)
    return value


def draining(current: AssignmentSnapshot, owners: Sequence[int]) -> AssignmentSnapshot:
    roster = [participant(n) for n in sorted(set(owners))]
    return next_draining(current, owners, roster, proof(), now_ms=2_000)


def decision(drain: AssignmentSnapshot, verdict: AssignmentVerdict) -> AssignmentDrainDecision:
    """A drain decision by the opening term; a Commit carries a canonical handoff checkpoint."""
    assert drain.drain_transition is not None
    handoff = None
    if verdict is AssignmentVerdict.COMMIT:
        handoff = RecoveryCapsuleRef(epoch=5, checkpoint_id=5, sha256="5a" * 32, len=64)
    return AssignmentDrainDecision(
        transition=drain.drain_transition,
        leader_proof=proof(),
        verdict=verdict,
        handoff_checkpoint=handoff,
    )
