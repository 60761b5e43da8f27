"""Builders shared by the recovery-fault, recovery-release and catalog tests.

A "round" here is frozen from the authority's current fault inventory, driven by owner A
(node 1) under a given proof, with an assignment fence whose owners are A and `owners`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from laminar_cluster.authority.recovery_faults import RecoveryFaultInventory
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import (
    CatalogManifest,
    CatalogManifestEntry,
    PhaseReleaseCommitted,
    RecoveryAnnouncement,
    RecoveryFaultPublisher,
    RecoveryRound,
    RecoveryRoundId,
)
from tests.lease.pausing_store import boot, far_deadline

T = TypeVar("T")


def publisher(node: int, boot_n: int | None = None, term: int = 1) -> RecoveryFaultPublisher:
    participant = FenceParticipant(
        node_id=node, boot_incarnation=boot(node if boot_n is None else boot_n)
    )
    return RecoveryFaultPublisher(participant=participant, process_term=term)


def fence_of(driver_node: int, *owners: int) -> CheckpointAssignmentFence:
    """A canonical fence owned by the driver and `owners`, each with its default boot."""
    nodes = sorted({driver_node, *owners})
    return CheckpointAssignmentFence(
        assignment_version=3,
        vnode_count=256,
        assignment_digest=tuple(range(1, 33)),
        participants=tuple(FenceParticipant(node_id=n, boot_incarnation=boot(n)) for n in nodes),
    )


def round_of(
    proof: LeaderProof,
    inventory: RecoveryFaultInventory,
    *,
    generation: int = 1,
    owners: tuple[int, ...] = (),
    evidence: tuple[int, ...] = (),
) -> RecoveryRound:
    """A valid round freezing `inventory`; `evidence` nodes (non-owners, fault reporters) join
    the stopped roster with their default boots."""
    driver = proof.owner.node_id
    return RecoveryRound(
        id=RecoveryRoundId(generation=generation, nonce=boot(5000 + generation), driver=driver),
        leader_proof=proof,
        assignment_fence=fence_of(driver, *owners),
        evidence_participants=tuple(
            FenceParticipant(node_id=n, boot_incarnation=boot(n)) for n in sorted(evidence)
        ),
        fault_revision=inventory.revision,
        faults=inventory.faults,
    )


def terminal_of(round_: RecoveryRound, epoch: int = 4) -> RecoveryAnnouncement:
    return RecoveryAnnouncement(version=1, round=round_, phase=PhaseReleaseCommitted(epoch=epoch))


def manifest_of(*names: str, ddl_bytes: int = 0) -> CatalogManifest:
    """A valid manifest with one table per name; `ddl_bytes` pads every DDL to that size."""
    entries = []
    for name in names:
        ddl = f"CREATE TABLE {name} (id BIGINT)"
        entries.append(
            CatalogManifestEntry(canonical_name=name, kind="table", ddl=ddl.ljust(ddl_bytes, "x"))
        )
    return CatalogManifest(version=1, entries=tuple(entries))


def deadline(leader: LeaderLeaseStore) -> float:
    return far_deadline(leader.clock)


async def settle(awaitable: Awaitable[T]) -> T | Exception:
    """The result of `awaitable`, or the exception it raised (for tasks raced in a TaskGroup)."""
    try:
        return await awaitable
    except Exception as error:
        return error
