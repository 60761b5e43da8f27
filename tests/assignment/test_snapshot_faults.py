"""Ambiguous and failed writes of the assignment snapshot store (docs/protocols/
assignment-snapshots.md, "Outcomes of each conditional write"; AS §2.11, AS-3: a retry after an
ambiguous create) and the bounded proposal prune (AS-8), on the memory store with scripted
faults."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.assignment.model import committed_target
from laminar_cluster.assignment.paths import (
    FINALIZATIONS_PREFIX,
    MATERIALIZATIONS_PREFIX,
    PROPOSALS_PREFIX,
    SNAPSHOTS_PREFIX,
    proposals_prefix,
)
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import InvalidArgument, StoreUnavailable, WriteOutcomeUnknown
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.store import open_store
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.assignment.snapshot_support import decision, draining, snapshot


def _faulty() -> tuple[FaultyStore, AssignmentSnapshotStore]:
    store = FaultyStore(open_store("memory://"), clock=SimulatedClock(seed=3), seed=3)
    return store, AssignmentSnapshotStore(store)


def test_ambiguous_creates_settle_by_read_back() -> None:
    async def main() -> None:
        store, snaps = _faulty()
        v1 = snapshot(1, [1, 1])
        store.fail_next(FaultKind.AFTER, key_prefix=SNAPSHOTS_PREFIX)
        assert await snaps.save_if_absent(v1) == v1
        drain = draining(v1, [1, 2])
        store.fail_next(FaultKind.AFTER_AS_CONFLICT, key_prefix=SNAPSHOTS_PREFIX)
        assert await snaps.save_if_version(drain, 1) == Rotated(drain)
        assert await snaps.save_if_version(drain, 1) == Rotated(drain)  # AS-3: a plain retry
        terminal = committed_target(drain, now_ms=3)
        store.fail_next(FaultKind.AFTER, key_prefix=FINALIZATIONS_PREFIX)
        commit = decision(drain, AssignmentVerdict.COMMIT)
        assert await snaps.finalize_drain(drain, terminal, commit) == Rotated(terminal)
        recovered = snapshot(3, [1, 2], at_ms=5)
        store.fail_next(FaultKind.BEFORE, key_prefix=PROPOSALS_PREFIX)
        with pytest.raises(StoreUnavailable):
            await snaps.stage_recovery_proposal(recovered)
        ref = await snaps.stage_recovery_proposal(recovered)
        store.fail_next(FaultKind.AFTER, key_prefix=MATERIALIZATIONS_PREFIX)
        assert await snaps.materialize_recovery(ref) == Rotated(recovered)
        assert await snaps.load() == recovered

    asyncio.run(main())


def test_phantom_conflict_is_unknown_then_retried() -> None:
    async def main() -> None:
        store, snaps = _faulty()
        v1 = snapshot(1, [1, 1])
        await snaps.save_if_absent(v1)
        v2 = snapshot(2, [1, 2])
        store.fail_next(FaultKind.PHANTOM_CONFLICT, key_prefix=SNAPSHOTS_PREFIX)
        with pytest.raises(WriteOutcomeUnknown):
            await snaps.save_if_version(v2, 1)
        assert await snaps.save_if_version(v2, 1) == Rotated(v2)

    asyncio.run(main())


def test_as8_prune_of_proposals_is_bounded_and_resumes() -> None:
    async def main() -> None:
        store, snaps = _faulty()
        await snaps.save_if_absent(snapshot(1, [1, 1]))
        for at_ms in range(300):  # more than 4 batches of 64 staged at version 2
            await snaps.stage_recovery_proposal(snapshot(2, [1, 2], at_ms=at_ms))
        await snaps.save_if_version(snapshot(2, [1, 2], at_ms=999), 1)
        await snaps.save_if_version(snapshot(3, [1, 2], at_ms=999), 2)
        await snaps.prune_before(2)  # v1 has no proposals
        with pytest.raises(InvalidArgument, match="remain"):
            await snaps.prune_before(3)
        assert await snaps.load_version(2) is not None  # raw v2 kept: the inventory stays whole
        await snaps.prune_before(3)
        assert await store.list(proposals_prefix(2)) == []
        assert await snaps.load_version(2) is None
        assert (await snaps.load()) == snapshot(3, [1, 2], at_ms=999)

    asyncio.run(main())
