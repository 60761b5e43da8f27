"""AS §2.13 digest vectors (RB-T16) and the owner-map fence rules (AS §2.2)."""

from __future__ import annotations

import uuid

import pytest

from laminar_cluster.assignment.digest import (
    drain_id,
    fence_digest,
    fence_from_owner_map,
    fence_matches_owner_map,
    owner_map_digest,
    required_participants,
    transition_digest,
)
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.fencing import FenceParticipant, LeaderOwner, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition

P1 = FenceParticipant(node_id=1, boot_incarnation=str(uuid.UUID(int=11)))
P2 = FenceParticipant(node_id=2, boot_incarnation=str(uuid.UUID(int=22)))


def test_rb_t16_digest_vectors() -> None:
    assert owner_map_digest(3, [1, 2, 1]).hex() == (
        "69dfadb2183f2e0d2a11771e2a9990e622abc002b0908f157f54507a77542eb9"
    )
    v1 = fence_from_owner_map(1, [1, 2, 1], [P1, P2])
    assert fence_digest(v1).hex() == (
        "6c8286bb5e930c69cca369abfae2d80e516c5fe213ee94f43c593681bf4b45eb"
    )
    assert owner_map_digest(3, [1, 1, 1]).hex() == (
        "6a9abcd3c2fa79d4d1530b633130c4a85f027d8a58180abf31ceeaf670b97918"
    )
    v2 = fence_from_owner_map(2, [1, 1, 1], [P1])
    assert fence_digest(v2).hex() == (
        "a567335a8e8ca2b4245699ee380bc313f21ec9a865cb07dabb5677a6f1ff9b45"
    )
    leader = LeaderProof(
        owner=LeaderOwner(node_id=1, boot_id=str(uuid.UUID(int=11)), process_term=1),
        fencing_token=1,
    )
    transition = AssignmentDrainTransition(predecessor=v1, target=v2, leader=leader)
    assert transition_digest(transition).hex() == (
        "176b0c064373be9be4d58370c19014b0d30f52c48acea2a34bdeb06c426a7075"
    )
    round_id = drain_id(transition)
    assert (round_id.predecessor_version, round_id.target_version) == (1, 2)
    assert round_id.digest == transition_digest(transition) and round_id.is_canonical()
    assert required_participants(transition) == (P1, P2)  # joiners are never required


def test_from_owner_map_requires_exact_owner_set() -> None:
    with pytest.raises(ShapeViolation, match="owner set"):
        fence_from_owner_map(1, [1, 1, 1], [P1, P2])  # p2 owns nothing
    with pytest.raises(ShapeViolation, match="owner set"):
        fence_from_owner_map(1, [1, 0, 2], [P1, P2])  # owner 0
    with pytest.raises(ShapeViolation, match="not canonical"):
        fence_from_owner_map(1, [1, 2], [P2, P1])  # unsorted
    fence = fence_from_owner_map(1, [1, 2, 1], [P1, P2])
    assert fence_matches_owner_map(fence, [1, 2, 1])
    assert not fence_matches_owner_map(fence, [2, 1, 1])
