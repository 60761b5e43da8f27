"""Builders shared by the assignment-decision tests (LA §3.6, LA §4.5): fences whose
roster holds the test owners, drain and recovery decisions, an in-memory fake of the assignment
snapshot store (`AssignmentSnapshotSource`), and small wrappers with far deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from laminar_cluster.authority.assignment_decisions import (
    audit_assignment_decisions,
    prune_assignment_drain_decisions_before,
    record_assignment_drain_decision,
    record_assignment_recovery_decision,
)
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.errors import LaminarError, ObjectNotFound
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    LeaderAuthorityRecord,
    ProcessLease,
    ProcessLeaseFence,
)
from laminar_cluster.store import ObjectStore
from tests.lease.pausing_store import (
    TTL_S,
    B,
    acquired,
    authority,
    begin,
    boot,
    far_deadline,
    held,
    sim,
    takeover,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
COMMIT, ABORT = AssignmentVerdict.COMMIT, AssignmentVerdict.ABORT
replace = msgspec.structs.replace


def fence(
    version: int, nodes: tuple[int, ...] = (1, 2, 3), salt: int = 0
) -> CheckpointAssignmentFence:
    participants = tuple(FenceParticipant(node_id=n, boot_incarnation=boot(n)) for n in nodes)
    digest = tuple((version * 7 + salt + i) % 256 or 1 for i in range(32))
    return CheckpointAssignmentFence(
        assignment_version=version,
        vnode_count=256,
        assignment_digest=digest,
        participants=participants,
    )


def transition(target: int, leader: LeaderProof) -> AssignmentDrainTransition:
    return AssignmentDrainTransition(
        predecessor=fence(target - 1), target=fence(target), leader=leader
    )


def cref(epoch: int) -> RecoveryCapsuleRef:
    """A canonical committed-checkpoint reference of attempt `epoch` (names no real capsule)."""
    return RecoveryCapsuleRef(epoch=epoch, checkpoint_id=epoch, sha256=f"{epoch:02x}" * 32, len=64)


def drain(
    target: int,
    proof: LeaderProof,
    verdict: AssignmentVerdict = COMMIT,
    leader: LeaderProof | None = None,
) -> AssignmentDrainDecision:
    """A drain decision; a Commit carries the handoff checkpoint `cref(target)`."""
    return AssignmentDrainDecision(
        transition=transition(target, leader or proof),
        leader_proof=proof,
        verdict=verdict,
        handoff_checkpoint=cref(target) if verdict is COMMIT else None,
    )


def pfence(node: int, next_seq: int = 11) -> ProcessLeaseFence:
    return ProcessLeaseFence(
        predecessor=ProcessLease(node=node, owner=boot(node), term=4, seq=10, expires_at_ms=0),
        successor=ProcessLease(
            node=node, owner=boot(100 + node), term=5, seq=next_seq, expires_at_ms=0
        ),
    )


def recovery(
    target: int, proof: LeaderProof, removed: tuple[int, ...] = (3,)
) -> AssignmentRecoveryDecision:
    kept = tuple(n for n in (1, 2, 3) if n not in removed)
    return AssignmentRecoveryDecision(
        predecessor=fence(target - 1),
        target=fence(target, kept),
        proposal=AssignmentSnapshotRef(
            version=target, sha256=f"{target:02x}" * 32, encoded_len=100
        ),
        removed_process_fences=tuple(pfence(n) for n in removed),
        recovery_checkpoint=cref(target - 1),
        leader_proof=proof,
    )


@dataclass
class FakeSnapshots:
    """The assignment snapshot store: the current fence (and draining flag), staged proposals."""

    current: tuple[CheckpointAssignmentFence, bool] | None = None
    proposals: dict[str, CheckpointAssignmentFence] = field(default_factory=dict)
    materialized: list[AssignmentSnapshotRef] = field(default_factory=list)
    error: LaminarError | None = None

    def stage(self, decision: AssignmentRecoveryDecision) -> None:
        self.proposals[decision.proposal.sha256] = decision.target

    async def load_current(self) -> tuple[CheckpointAssignmentFence, bool] | None:
        if self.error is not None:
            raise self.error
        return self.current

    async def load_recovery_proposal(self, ref: AssignmentSnapshotRef) -> CheckpointAssignmentFence:
        if ref.sha256 not in self.proposals:
            raise ObjectNotFound(f"proposal {ref.sha256} not found", key=f"proposals/{ref.sha256}")
        return self.proposals[ref.sha256]

    async def materialize_recovery(self, ref: AssignmentSnapshotRef) -> object:
        self.materialized.append(ref)
        return ("rotated", ref.version)


async def leader(store: ObjectStore, seed: int = 1) -> tuple[LeaderLeaseStore, LeaderProof]:
    auth = authority(store, seed)
    return auth, acquired(await begin(auth)).proof()


async def successor(
    store: ObjectStore, incumbent: LeaderLeaseStore
) -> tuple[LeaderLeaseStore, LeaderProof]:
    """Rival B observes the incumbent for a full ttl and takes over (token + 1)."""
    rival = authority(store, 2)
    observation = rival.observe_rival(B, held(await begin(rival, B)))
    sim(rival).advance(TTL_S + 0.5)
    return rival, acquired(await takeover(rival, observation)).proof()


async def rec_drain(
    auth: LeaderLeaseStore, proof: LeaderProof, decision: AssignmentDrainDecision
) -> Any:
    return await record_assignment_drain_decision(
        auth, proof, decision, deadline=far_deadline(auth.clock)
    )


async def rec_recovery(
    auth: LeaderLeaseStore,
    proof: LeaderProof,
    decision: AssignmentRecoveryDecision,
    snaps: FakeSnapshots,
) -> Any:
    return await record_assignment_recovery_decision(
        auth, proof, decision, snaps, deadline=far_deadline(auth.clock)
    )


async def prune(auth: LeaderLeaseStore, proof: LeaderProof, before: int) -> int:
    return await prune_assignment_drain_decisions_before(
        auth, proof, before, deadline=far_deadline(auth.clock)
    )


async def head_of(auth: LeaderLeaseStore) -> LeaderAuthorityRecord:
    record = await auth.load_record()
    assert record is not None
    return record


async def live_versions(auth: LeaderLeaseStore) -> list[tuple[int, int]]:
    """(admitting sequence, target version) of every live decision, ascending."""
    audited = await audit_assignment_decisions(auth, await head_of(auth))
    return [(link.sequence, link.target_version) for link, _ in audited]


def link(seq: int, target: int) -> AssignmentDecisionLink:
    return AssignmentDecisionLink(sequence=seq, target_version=target)
