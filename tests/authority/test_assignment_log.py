"""Assignment decisions on the authority log, the protocol edges (LA §4.5.1, LA §4.5.5, LA §4.5.6,
LA §11.1, LA §11.2; invariants LA-5, LA-11, LA-21): fencing of stale or foreign proofs, lost
responses, same-term contention, the caller's deadline, chain corruption, the live-link bound.

All on memory and file; races and lost responses go through PausingStore.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.authority import assignment_chain
from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    DecisionUnchanged,
    assignment_drain_decision,
    prune_assignment_drain_decisions_before,
    record_assignment_drain_decision,
)
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InventoryChanged,
    Refused,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    AuthorityAssignmentDecisionFloor,
    LeaderAuthorityRecord,
)
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from tests.authority.assignment_support import (
    ABORT,
    LOCAL,
    drain,
    head_of,
    leader,
    link,
    live_versions,
    prune,
    rec_drain,
    replace,
)
from tests.lease.pausing_store import (
    B,
    PausingStore,
    acquired,
    authority,
    put_record,
    record_at,
    renew,
    set_pointer,
    sim,
)


@LOCAL
def test_decisions_require_the_exact_current_term(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        ghost = LeaderProof(owner=B.proof_owner(), fencing_token=1)
        lonely = authority(make_store(), 5)  # an empty namespace
        with pytest.raises(Fenced, match="no durable leader authority head"):
            await rec_drain(lonely, ghost, drain(2, ghost))
        assert await assignment_drain_decision(lonely, 2) is None
        assert await prune(lonely, ghost, 0) == 0
        auth, proof = await leader(make_store())
        with pytest.raises(Fenced, match="not the canonical proof it is recorded under"):
            await rec_drain(auth, proof, drain(2, ghost, ABORT, leader=proof))
        for wrong in (ghost, replace(proof, fencing_token=2)):
            with pytest.raises(Fenced, match="does not name the durable authority term"):
                await rec_drain(auth, wrong, drain(2, wrong, ABORT, leader=proof))
            with pytest.raises(Fenced, match="does not name the durable authority term"):
                await prune(auth, wrong, 3)
        with pytest.raises(Fenced, match="floor proof is not canonical"):
            await prune(auth, replace(proof, fencing_token=0), 3)
        assert (await head_of(auth)).lease.seq == 1  # LA-5: nothing was admitted

    asyncio.run(main())


@LOCAL
def test_ambiguous_decision_create_reports_unchanged(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        auth, proof = await leader(paused)
        decision = drain(2, proof)
        paused.pause_put(record_path(2), fail_after_apply=True).release.set()
        assert await rec_drain(auth, proof, decision) == DecisionUnchanged(decision)  # LA §11.2
        assert await live_versions(auth) == [(2, 2)]

    asyncio.run(main())


@LOCAL
def test_delayed_decision_retries_after_same_term_renewal(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        auth, proof = await leader(paused)
        other = authority(make_store(), 1)  # the same process, another client
        decision = drain(2, proof)
        gate = paused.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            recording = group.create_task(rec_drain(auth, proof, decision))
            await gate.wait_reached()
            acquired(await renew(other, 1))  # the renewal wins seq 2
            gate.release.set()
        assert recording.result() == DecisionCreated(decision)
        head = await head_of(auth)
        assert (head.lease.seq, head.lease.renewal_sequence) == (3, 2)  # the renewal is kept
        assert await live_versions(auth) == [(3, 2)]

    asyncio.run(main())


@LOCAL
def test_contended_after_own_record_landed_is_unchanged(
    make_store: Callable[[], ObjectStore],
) -> None:
    """LA §11.1: our record was created, but a reader repaired the pointer and another append
    published past it before our pointer update: the winner's chain holds our decision."""

    async def main() -> None:
        paused = PausingStore(make_store())
        auth, proof = await leader(paused)
        other = authority(make_store(), 1)
        decision = drain(2, proof)
        gate = paused.pause_put(HEAD_PATH)
        async with asyncio.TaskGroup() as group:
            recording = group.create_task(rec_drain(auth, proof, decision))
            await gate.wait_reached()  # record 2 exists; the pointer still names 1
            acquired(await renew(other, 1))  # repairs the pointer to 2, appends 3
            gate.release.set()
        assert recording.result() == DecisionUnchanged(decision)
        assert (await head_of(auth)).lease.seq == 3
        assert await live_versions(auth) == [(2, 2)]

    asyncio.run(main())


def test_deadline_bounds_a_hung_decision() -> None:
    async def main() -> None:
        paused = PausingStore(ObstoreStore.memory())
        auth, proof = await leader(paused)
        gate = paused.pause_get(HEAD_PATH)
        deadline = auth.clock.monotonic() + 1.0
        with pytest.raises(ExceptionGroup) as failed:
            async with asyncio.TaskGroup() as group:
                group.create_task(
                    record_assignment_drain_decision(
                        auth, proof, drain(2, proof), deadline=deadline
                    )
                )
                await gate.wait_reached()
                sim(auth).advance(1.0)
        assert failed.group_contains(DeadlineExceeded, match="deadline passed")
        with pytest.raises(DeadlineExceeded, match="before the operation started"):
            await prune_assignment_drain_decisions_before(auth, proof, 3, deadline=deadline)

    asyncio.run(main())


def _admitting(
    seq: int,
    decision: AssignmentDrainDecision,
    previous: AssignmentDecisionLink | None = None,
    floor: AuthorityAssignmentDecisionFloor | None = None,
) -> LeaderAuthorityRecord:
    """A standalone valid record `seq` (owner A, token 1) admitting `decision`."""
    return replace(
        record_at(seq, renewal=1),
        assignment_decision=decision,
        previous_assignment_decision=previous,
        assignment_decision_head=link(seq, decision.target_version),
        assignment_decision_floor=floor,
    )


async def _publish(store: ObjectStore, record: LeaderAuthorityRecord) -> None:
    await put_record(store, record)
    await set_pointer(store, record.lease.seq)


@LOCAL
def test_audit_fails_closed_on_a_broken_chain(make_store: Callable[[], ObjectStore]) -> None:
    """LA-11: hand-written histories whose records are each valid but whose chain is not."""

    async def main() -> None:
        store = make_store()
        auth = authority(store, 1)
        proof = record_at(1).lease.proof()
        await put_record(store, record_at(1))
        await _publish(store, _admitting(2, drain(2, proof)))
        assert await live_versions(auth) == [(2, 2)]
        cases = {  # the head link of a non-admitting record -> the failure
            link(2, 3): "link version 3 sequence 2 does not match its authority record",
            link(1, 3): "points to non-decision authority record 1",
        }
        for seq, (bad, message) in enumerate(cases.items(), start=3):
            await _publish(store, replace(record_at(seq, renewal=1), assignment_decision_head=bad))
            with pytest.raises(CorruptRecord, match=message) as caught:
                await assignment_drain_decision(auth, 3)
            assert caught.value.key == record_path(bad.sequence)
        await _publish(store, replace(record_at(5, renewal=1), assignment_decision_head=link(2, 2)))
        await store.delete(record_path(2))  # a live record vanished under the walk
        auth.store.records.clear()  # ... before this process read it (read records are kept)
        with pytest.raises(InventoryChanged, match="record 2 disappeared during audit"):
            await assignment_drain_decision(auth, 3)
        # Floors whose anchor the live chain does not meet.
        floor = AuthorityAssignmentDecisionFloor(
            before_target_version=3,
            terminal_anchor=drain(2, proof, ABORT),
            terminal_anchor_link=link(1, 2),
        )
        await put_record(store, _admitting(6, drain(3, proof)))
        seven = replace(record_at(7, renewal=1), assignment_decision_floor=floor)
        await _publish(store, replace(seven, assignment_decision_head=link(6, 3)))
        with pytest.raises(CorruptRecord, match="stopped without its durable retention anchor"):
            await assignment_drain_decision(auth, 3)
        await _publish(store, _admitting(8, drain(4, proof), previous=link(2, 2), floor=floor))
        with pytest.raises(CorruptRecord, match="does not meet durable floor 3 at its terminal"):
            await assignment_drain_decision(auth, 4)

    asyncio.run(main())


@LOCAL
def test_la21_live_link_budget_refuses(
    make_store: Callable[[], ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LA-21: the live chain never outgrows its audit bound, so the floor can always advance."""

    async def main() -> None:
        monkeypatch.setattr(assignment_chain, "MAX_LIVE_AUTHORITY_LINKS", 2)
        auth, proof = await leader(make_store())
        for version in (2, 3):
            assert isinstance(await rec_drain(auth, proof, drain(version, proof)), DecisionCreated)
        with pytest.raises(Refused, match="holds 2 live decisions, the fixed 2-link authority"):
            await rec_drain(auth, proof, drain(4, proof))
        assert (await head_of(auth)).lease.seq == 3  # nothing was written
        assert await prune(auth, proof, 4) == 4
        assert await rec_drain(auth, proof, drain(4, proof)) == DecisionCreated(drain(4, proof))
        assert await rec_drain(auth, proof, drain(5, proof)) == DecisionCreated(drain(5, proof))
        monkeypatch.setattr(assignment_chain, "MAX_LIVE_AUTHORITY_LINKS", 1)
        with pytest.raises(Refused, match="exceeds the fixed 1-link authority bound"):
            await assignment_drain_decision(auth, 5)

    asyncio.run(main())
