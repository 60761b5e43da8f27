"""AS-6 with the real leader authority (AS §2.5, AS §2.6, AS §2.11; RB-T60): a recovery
decision is admitted against `AssignmentSnapshotStore` as the authority's snapshot source and
materialized through `materialize_assignment_recovery`; a drain is finalized with its recorded
decision; the read-side audit finds both backed and reports a bare committed successor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.assignment.audit import AuthorityDecisions, audit_authority_backing
from laminar_cluster.assignment.model import committed_target, next_draining, validate_snapshot
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    materialize_assignment_recovery,
    new_drain_decision,
)
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import AssignmentRecoveryDecision, AssignmentVerdict
from laminar_cluster.store import ObjectStore
from tests.authority.assignment_support import cref, leader, pfence, rec_drain, rec_recovery
from tests.lease.pausing_store import boot

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


def _snapshot(version: int, owners: list[int]) -> AssignmentSnapshot:
    roster = tuple(
        FenceParticipant(node_id=n, boot_incarnation=boot(n)) for n in sorted(set(owners))
    )
    return AssignmentSnapshot(
        version=1,
        assignment_version=version,
        owners=tuple(owners),
        participants=roster,
        updated_at_ms=version,
        draining=False,
        drain_transition=None,
    )


@LOCAL
def test_as6_authority_backs_recovery_and_drain(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        auth, proof = await leader(store)
        snaps = AssignmentSnapshotStore(store)
        v1 = _snapshot(1, [1, 2, 3, 1])
        await snaps.save_if_absent(v1)
        # Recovery: node 3 failed; stage, admit against the store, materialize via the authority.
        v2 = _snapshot(2, [1, 2, 1, 1])
        ref = await snaps.stage_recovery_proposal(v2)
        recovery = AssignmentRecoveryDecision(
            predecessor=validate_snapshot(v1),
            target=validate_snapshot(v2),
            proposal=ref,
            removed_process_fences=(pfence(3),),
            recovery_checkpoint=cref(1),
            leader_proof=proof,
        )
        assert isinstance(await rec_recovery(auth, proof, recovery, snaps), DecisionCreated)  # type: ignore[arg-type]
        assert await materialize_assignment_recovery(auth, 2, snaps) == Rotated(v2)
        assert await snaps.load() == v2
        # Drain v2 -> v3 by the same term, committed by its decision.
        roster = [FenceParticipant(node_id=n, boot_incarnation=boot(n)) for n in (1, 2)]
        drain = next_draining(v2, [2, 2, 1, 1], roster, proof, now_ms=7)
        assert isinstance(await snaps.save_if_version(drain, 2), Rotated)
        assert drain.drain_transition is not None
        commit = new_drain_decision(
            drain.drain_transition, proof, AssignmentVerdict.COMMIT, cref(2)
        )
        assert isinstance(await rec_drain(auth, proof, commit), DecisionCreated)
        terminal = committed_target(drain, now_ms=8)
        assert await snaps.finalize_drain(drain, terminal, commit) == Rotated(terminal)
        decisions = AuthorityDecisions(auth)
        assert await audit_authority_backing(store, decisions) == []
        # RB-T60: a bare committed successor has no decision.
        await snaps.save_if_version(_snapshot(4, [1, 2, 2, 1]), 3)
        problems = await audit_authority_backing(store, decisions)
        assert [(p.version, p.reason) for p in problems] == [
            (4, "no drain transition or recovery authority decision")
        ]
        await store.close()

    asyncio.run(main())
