"""RB-5 (docs/protocols/rebalance.md): a drain terminal is exactly its certified target (Commit)
or the exact predecessor map and roster at the target version (Abort); the real snapshot store
finalizes nothing else, and the audit classifies nothing else as a terminal."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from laminar_cluster.assignment.model import aborted_target, committed_target
from laminar_cluster.assignment.paths import finalization_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.rebalance.audit.drain import finalized_drain_outcome
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import open_store
from tests.assignment.snapshot_support import decision, draining, participant, snapshot
from tests.rebalance.refusal_support import raises_because

COMMIT, ABORT = AssignmentVerdict.COMMIT, AssignmentVerdict.ABORT
replace = msgspec.structs.replace


def neither(v1: AssignmentSnapshot, drain: AssignmentSnapshot) -> list[AssignmentSnapshot]:
    """Committed v2 objects that are neither the drain's target nor its exact rollback."""
    target = committed_target(drain, now_ms=3_000)
    rollback = aborted_target(drain, v1, now_ms=3_000)
    restarted = participant(1, boot=99)  # node 1's vnodes certified to another boot
    return [
        replace(rollback, participants=(restarted,)),  # the predecessor map, another roster
        replace(target, participants=(restarted, participant(2))),  # the target map, too
        replace(target, owners=(2, 1)),  # a third map over the target roster
    ]


def test_rb5_a_terminal_is_the_target_or_the_exact_rollback() -> None:
    async def main() -> None:
        store = open_store("memory://")
        snaps = AssignmentSnapshotStore(store)
        v1 = snapshot(1, (1, 1))
        await snaps.save_if_absent(v1)
        drain = draining(v1, (1, 2))
        assert isinstance(await snaps.save_if_version(drain, 1), Rotated)
        transition = drain.drain_transition
        assert transition is not None
        target = committed_target(drain, now_ms=3_000)
        rollback = aborted_target(drain, v1, now_ms=3_000)

        refused = [(t, v) for t in neither(v1, drain) for v in (COMMIT, ABORT)]
        refused += [(target, ABORT), (rollback, COMMIT)]  # a terminal against its verdict
        for terminal, verdict in refused:
            with pytest.raises(InvalidArgument):
                await snaps.finalize_drain(drain, terminal, decision(drain, verdict))
            with pytest.raises(ObjectNotFound):  # nothing was finalized
                await store.head(finalization_path(2))
            assert await snaps.load() == drain
        for terminal in [*neither(v1, drain), drain, replace(target, assignment_version=3)]:
            with raises_because(CorruptRecord, Refusal.TERMINAL_MISMATCH):
                finalized_drain_outcome(transition, terminal)
        assert finalized_drain_outcome(transition, target) is SourceDrainOutcome.COMMIT
        assert finalized_drain_outcome(transition, rollback) is SourceDrainOutcome.ABORT

        finalized = await snaps.finalize_drain(drain, rollback, decision(drain, ABORT))
        assert finalized == Rotated(rollback)
        terminal = await snaps.load()
        assert terminal == rollback
        assert (terminal.owners, terminal.participants) == (v1.owners, v1.participants)
        assert finalized_drain_outcome(transition, terminal) is SourceDrainOutcome.ABORT

    asyncio.run(main())
