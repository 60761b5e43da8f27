"""Assignment snapshot store invariants AS-1 .. AS-9 and scenarios RB-T1 .. RB-T15 and RB-T60
on memory, file:// and the S3 test server (docs/protocols/assignment-snapshots.md)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.assignment.audit import audit_authority_backing
from laminar_cluster.assignment.model import (
    aborted_target,
    committed_target,
    matches_owner_map,
    owners_from_vnode_map,
    to_vnode_vec,
    validate_snapshot,
)
from laminar_cluster.assignment.paths import (
    HEAD_HINT_PATH,
    finalization_path,
    proposal_path,
    snapshot_path,
)
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Conflict, Rotated
from laminar_cluster.authority.assignment_decisions import AssignmentSnapshotSource
from laminar_cluster.codec import encode
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import AssignmentVerdict, AuthorityAssignmentDecision
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.assignment.snapshot_support import decision, draining, participant, snapshot

COMMIT, ABORT = AssignmentVerdict.COMMIT, AssignmentVerdict.ABORT


def run(make_store: Callable[[], ObjectStore], scenario: Callable[..., object]) -> None:
    async def main() -> None:
        store = make_store()
        try:
            await scenario(AssignmentSnapshotStore(store), store)  # type: ignore[misc]
        finally:
            await store.close()

    asyncio.run(main())


def test_as1_seed_roundtrip(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        first = snapshot(1, [1, 1])
        assert await snaps.save_if_absent(first) == first
        assert await snaps.load() == first
        assert await snaps.save_if_absent(snapshot(1, [2, 2])) is None
        assert await snaps.save_if_absent(first) == first  # an identical retry
        assert await snaps.load() == first

    run(make_store, scenario)


def test_as1_seed_only_v1(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        with pytest.raises(InvalidArgument, match="version 1"):
            await snaps.save_if_absent(snapshot(2, [1, 1]))
        await snaps.save_if_absent(snapshot(1, [1, 1]))
        assert isinstance(await snaps.save_if_version(snapshot(2, [1, 1], at_ms=5), 1), Rotated)
        with pytest.raises(InvalidArgument, match="head is already version 2"):
            await snaps.save_if_absent(snapshot(1, [1, 1]))

    run(make_store, scenario)


def test_as3_cas_requires_plus_one(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        await snaps.save_if_absent(snapshot(1, [1, 1]))
        with pytest.raises(InvalidArgument, match="monotonic"):
            await snaps.save_if_version(snapshot(3, [1, 1]), 1)
        v2 = snapshot(2, [1, 2])
        assert await snaps.save_if_version(v2, 1) == Rotated(v2)
        assert await snaps.save_if_version(snapshot(2, [2, 2]), 1) == Conflict(v2)
        with pytest.raises(InvalidArgument, match="not prior"):
            await snaps.save_if_version(snapshot(4, [1, 1]), 3)

    run(make_store, scenario)


def test_as3_cas_racers(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        await snaps.save_if_absent(snapshot(1, [1, 1]))
        other = AssignmentSnapshotStore(store)
        a, b = snapshot(2, [1, 2]), snapshot(2, [2, 1])
        async with asyncio.TaskGroup() as group:
            first = group.create_task(snaps.save_if_version(a, 1))
            second = group.create_task(other.save_if_version(b, 1))
        results = [first.result(), second.result()]
        winners = [r.snapshot for r in results if isinstance(r, Rotated)]
        assert len(winners) == 1
        assert [r.winner for r in results if isinstance(r, Conflict)] == winners
        assert await snaps.load() == winners[0]

    run(make_store, scenario)


def test_as2_noncontiguous_inventory_fails(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        await snaps.save_if_absent(snapshot(1, [1, 1]))
        await store.put(snapshot_path(3), encode(snapshot(3, [1, 1])), CREATE)
        with pytest.raises(CorruptRecord, match="not contiguous"):
            await snaps.load()

    run(make_store, scenario)


def test_as2_noncanonical_name_fails_sibling_ignored(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        v1 = snapshot(1, [1, 1])
        await snaps.save_if_absent(v1)
        await store.put("control/assignment-snapshots/notes.txt", b"hello", CREATE)
        assert await snaps.load() == v1
        await store.put("control/assignment-snapshots/v2.json", encode(v1), CREATE)
        with pytest.raises(CorruptRecord, match="20 digits"):
            await snaps.load()

    run(make_store, scenario)


async def _draining_v2(snaps: AssignmentSnapshotStore) -> tuple[AssignmentSnapshot, ...]:
    v1 = snapshot(1, [1, 1])
    await snaps.save_if_absent(v1)
    drain = draining(v1, [1, 2])
    assert await snaps.save_if_version(drain, 1) == Rotated(drain)
    return v1, drain


def test_as4_finalize_commit_overlay(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        drain = (await _draining_v2(snaps))[1]
        assert await snaps.load() == drain
        terminal = committed_target(drain, now_ms=3_000)
        result = await snaps.finalize_drain(drain, terminal, decision(drain, COMMIT))
        assert result == Rotated(terminal)
        assert await snaps.load() == terminal
        assert await snaps.load_drain_transition(2) == drain.drain_transition
        assert await snaps.load_version(2) == terminal
        # Retrying the same finalization is idempotent.
        assert await snaps.finalize_drain(drain, terminal, decision(drain, COMMIT)) == result

    run(make_store, scenario)


def test_as4_finalize_single_winner(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        v1, drain = await _draining_v2(snaps)
        rollback = aborted_target(drain, v1, now_ms=3_000)
        assert await snaps.finalize_drain(drain, rollback, decision(drain, ABORT)) == Rotated(
            rollback
        )
        commit = committed_target(drain, now_ms=3_000)
        assert await snaps.finalize_drain(drain, commit, decision(drain, COMMIT)) == Conflict(
            rollback
        )
        assert await snaps.load() == rollback

    run(make_store, scenario)


def test_as4_finalize_rejects_stale_or_foreign(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        drain = (await _draining_v2(snaps))[1]
        foreign = snapshot(2, [2, 2])
        with pytest.raises(InvalidArgument, match="neither the transition's target"):
            await snaps.finalize_drain(drain, foreign, decision(drain, COMMIT))
        commit = committed_target(drain, now_ms=3_000)
        with pytest.raises(InvalidArgument, match="does not match the proposal"):
            await snaps.finalize_drain(drain, commit, decision(drain, ABORT))  # AS-6
        await snaps.finalize_drain(drain, commit, decision(drain, COMMIT))
        v3 = snapshot(3, [1, 2], at_ms=9)
        assert isinstance(await snaps.save_if_version(v3, 2), Rotated)
        with pytest.raises(InvalidArgument, match="head is 3"):
            await snaps.finalize_drain(drain, commit, decision(drain, COMMIT))

    run(make_store, scenario)


def test_as7_recovery_materialization_preferred(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, _: ObjectStore) -> None:
        await _draining_v2(snaps)  # a stale drain wins the raw v2 key
        recovered = snapshot(2, [1, 1], at_ms=7)
        ref = await snaps.stage_recovery_proposal(recovered)
        assert await snaps.materialize_recovery(ref) == Rotated(recovered)
        assert await snaps.load() == recovered
        assert await snaps.load_version(2) == recovered
        assert await snaps.load_drain_transition(2) is None
        source: AssignmentSnapshotSource = snaps  # the leader authority's view of the store
        assert await source.load_recovery_proposal(ref) == validate_snapshot(recovered)
        current = await source.load_current()
        assert current == (validate_snapshot(recovered), False)
        # A second, different proposal loses to the first materialization.
        other = await snaps.stage_recovery_proposal(snapshot(2, [1, 1], at_ms=8))
        assert await snaps.materialize_recovery(other) == Conflict(recovered)

    run(make_store, scenario)


def test_as8_prune_keeps_pair(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        v = await _draining_v2(snaps)
        commit = committed_target(v[1], now_ms=3)
        await snaps.finalize_drain(v[1], commit, decision(v[1], COMMIT))
        ref2 = await snaps.stage_recovery_proposal(snapshot(2, [1, 1], at_ms=4))
        drain3 = draining(commit, [2, 2])
        await snaps.save_if_version(drain3, 2)
        await snaps.finalize_drain(
            drain3, c3 := committed_target(drain3, now_ms=5), decision(drain3, COMMIT)
        )
        v4 = snapshot(4, [2, 1], at_ms=6, boots={})
        await snaps.save_if_version(v4, 3)
        await snaps.prune_before(3)
        for key in (snapshot_path(1), snapshot_path(2), finalization_path(2)):
            assert not await store.list(key)
        assert not await store.list(proposal_path(2, ref2.sha256))
        assert await snaps.load_version(3) == c3
        assert await snaps.load() == v4
        await snaps.prune_before(0)
        assert await snaps.load_version(1) is None

    run(make_store, scenario)


def test_as5_proposal_content_addressed(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        proposal = snapshot(2, [1, 2])
        ref = await snaps.stage_recovery_proposal(proposal)
        assert await snaps.stage_recovery_proposal(proposal) == ref
        assert await snaps.load_recovery_proposal_snapshot(ref) == proposal
        key = proposal_path(ref.version, ref.sha256)
        body = bytearray(encode(proposal))
        body[body.index(b"1000")] = ord("2")  # same length, different bytes
        await store.put(key, bytes(body), OVERWRITE)
        fresh = AssignmentSnapshotStore(store)  # `snaps` keeps the proposal it verified
        with pytest.raises(CorruptRecord, match="does not match its reference"):
            await fresh.load_recovery_proposal_snapshot(ref)
        with pytest.raises(CorruptRecord):
            await snaps.stage_recovery_proposal(proposal)
        missing = msgspec.structs.replace(ref, sha256="0" * 64)
        with pytest.raises(InvalidArgument, match="not staged"):
            await snaps.load_recovery_proposal(missing)

    run(make_store, scenario)


def _bad(**changes: object) -> AssignmentSnapshot:
    return msgspec.structs.replace(snapshot(1, [1, 2]), **changes)


def test_as9_records_are_validated_before_writing_and_after_reading(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        with pytest.raises(InvalidArgument, match="owner"):  # rule 6: owner 0 is no participant
            await snaps.save_if_absent(_bad(owners=(1, 0)))
        assert await store.list("control/") == []  # refused before any write
        await snaps.save_if_absent(snapshot(1, [1, 2]))
        unsorted = _bad(assignment_version=2, participants=(participant(2), participant(1)))
        with pytest.raises(InvalidArgument):  # rule 5
            await snaps.save_if_version(unsorted, 1)
        with pytest.raises(InvalidArgument):  # rule 6: a participant owning nothing
            await snaps.stage_recovery_proposal(_bad(assignment_version=2, owners=(1, 1)))
        # The seed and the head hint it published (AS §2.14); nothing of the refused writes.
        assert [meta.key for meta in await store.list("control/")] == [
            HEAD_HINT_PATH,
            snapshot_path(1),
        ]
        # Bytes written behind the store's back are refused on read, naming the object.
        await store.put(snapshot_path(2), encode(_bad(assignment_version=2, owners=(1, 0))), CREATE)
        with pytest.raises(CorruptRecord, match=re.escape(snapshot_path(2))):
            await snaps.load()
        await store.delete(snapshot_path(2))
        await store.put(snapshot_path(2), encode(snapshot(3, [1, 2])), CREATE)
        with pytest.raises(CorruptRecord, match="payload version 3 is not path version 2"):
            await snaps.load_version(2)

    run(make_store, scenario)


def test_as9_snapshot_validation() -> None:
    many = tuple(participant(n) for n in range(1, 131))
    cases = {
        "owner 0": _bad(owners=(1, 0)),
        "unsorted participants": _bad(participants=(participant(2), participant(1))),
        "participant owning nothing": _bad(owners=(1, 1)),
        "130 participants": _bad(owners=tuple(range(1, 131)), participants=many),
        "version 0": _bad(assignment_version=0),
        "draining without transition": _bad(draining=True),
        "no vnodes": _bad(owners=(), participants=()),
    }
    for name, value in cases.items():
        with pytest.raises(ShapeViolation):
            validate_snapshot(value)
            pytest.fail(name)
    with pytest.raises(ShapeViolation, match="not exactly"):
        owners_from_vnode_map({0: 1, 2: 1})  # sparse key set
    assert owners_from_vnode_map({1: 2, 0: 1}) == (1, 2)
    # ABI != 1 cannot be expressed: the ABI is the constant 1 inside every digest.


def test_as9_drain_certificate_binds_target() -> None:
    v1 = snapshot(1, [1, 1])
    drain = draining(v1, [1, 2])
    transition = drain.drain_transition
    assert transition is not None
    assert transition.target.assignment_version == 2
    assert transition.target.participants == drain.participants
    assert transition.predecessor == validate_snapshot(v1)
    assert matches_owner_map(drain, [1, 2])
    with pytest.raises(ShapeViolation, match="expected 1"):
        to_vnode_vec(drain, 1)
    assert to_vnode_vec(drain, 2) == [1, 2]


def test_as4_abort_restores_roster() -> None:
    v1 = snapshot(1, [1, 2])
    drain = draining(v1, [1, 3])  # node 2 replaced by node 3
    rollback = aborted_target(drain, v1, now_ms=5)
    assert rollback.owners == v1.owners
    assert rollback.participants == v1.participants
    assert rollback.assignment_version == 2
    assert not rollback.draining and rollback.drain_transition is None


class _Decisions:
    def __init__(self, decisions: dict[int, AuthorityAssignmentDecision]) -> None:
        self.decisions = decisions

    async def decision_at(self, target_version: int) -> AuthorityAssignmentDecision | None:
        return self.decisions.get(target_version)


def test_as6_bare_successor_audit(make_store: Callable[[], ObjectStore]) -> None:
    async def scenario(snaps: AssignmentSnapshotStore, store: ObjectStore) -> None:
        drain = (await _draining_v2(snaps))[1]
        assert await audit_authority_backing(store, _Decisions({})) == []  # open intent
        commit = committed_target(drain, now_ms=3)
        await snaps.finalize_drain(drain, commit, decision(drain, COMMIT))
        problems = await audit_authority_backing(store, _Decisions({}))
        assert [(p.version, p.reason) for p in problems] == [
            (2, "finalized drain has no drain authority decision")
        ]
        backed = _Decisions({2: decision(drain, COMMIT)})
        assert await audit_authority_backing(store, backed) == []
        assert await audit_authority_backing(store, _Decisions({2: decision(drain, ABORT)}))
        await snaps.save_if_version(snapshot(3, [1, 2], at_ms=9), 2)
        problems = await audit_authority_backing(store, backed)
        assert [(p.version, p.reason) for p in problems] == [
            (3, "no drain transition or recovery authority decision")
        ]

    run(make_store, scenario)
