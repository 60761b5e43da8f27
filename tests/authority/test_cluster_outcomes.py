"""Cluster checkpoint outcomes through the leader log (LA §4.4.1, LA §4.4.2;
LA-T45 to LA-T52 and LA-T57; invariants LA-5, LA-13, LA-14).

LA-T45, LA-T46, LA-T47 and LA-T50 run on memory, file and the S3 test server; the rest on memory and
file. Paused creates and lost responses go through PausingStore; takeovers wait out the ttl on the
rival's SimulatedClock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.catalog import encode_and_reference, seal_catalog
from laminar_cluster.authority.cluster_outcomes import (
    cluster_attempt_settlement,
    cluster_outcome,
    cluster_outcome_inventory,
    cluster_outcome_with_recovery_capsule,
    cluster_outcomes,
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
    prune_cluster_outcomes_before,
    record_cluster_outcome,
)
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
)
from laminar_cluster.errors import DeadlineExceeded, Fenced, InvalidArgument, Refused
from laminar_cluster.fencing import LeaderOwner, LeaderProof
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.store import ObjectStore
from tests.authority.recovery_support import manifest_of
from tests.authority.test_cluster_outcome_helpers import (
    FENCE,
    A,
    B,
    PausingStore,
    conflict,
    created,
    deadline,
    elect,
    head,
    open_leader,
    read_seq,
    record,
    record_all,
    record_seqs,
    sim_clock,
    take_over,
    unchanged,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


async def no_check(_: CheckpointOutcome) -> None:
    return None


async def raises(awaitable: Awaitable[object]) -> BaseException:
    """The exception `awaitable` raised (it must raise)."""
    try:
        await awaitable
    except Exception as error:
        return error
    raise AssertionError("expected an exception")


def test_la_t45_outcome_idempotent(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        first = created(await record(leader, proof, 10))
        assert first.verdict is CheckpointVerdict.ABORT
        assert first.scope is CheckpointScope.CLUSTER and first.leader_proof == proof
        assert unchanged(await record(leader, proof, 10)) == first
        # Another process instance (cold cache) converges on the same durable outcome.
        assert unchanged(await record(open_leader(make_store(), 2), proof, 10)) == first
        assert (await head(leader)).lease.seq == 2  # exactly one admitting record
        assert await cluster_outcomes(leader) == (first,)
        assert await cluster_outcome(leader, 10) == first

    asyncio.run(main())


def test_la_t46_outcome_conflict(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        commit = created(await record(leader, proof, 3, commit=True))
        # LA-13: one outcome per epoch, forever; the caller must obey the winner.
        assert conflict(await record(leader, proof, 3)) == commit
        assert conflict(await record(open_leader(make_store(), 2), proof, 3)) == commit
        assert unchanged(await record(leader, proof, 3, commit=True)) == commit
        assert (await head(leader)).lease.seq == 2
        assert await highest_cluster_committed_outcome(leader) == commit
        found = await cluster_outcome_with_recovery_capsule(leader, 3)
        assert found is not None and found[0] == commit
        assert found[1] is not None and found[1].attempt == CheckpointAttempt.canonical(3)

    asyncio.run(main())


def test_la_t47_wrong_token_or_owner(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        stale_next = LeaderProof(owner=proof.owner, fencing_token=proof.fencing_token + 1)
        foreign = LeaderProof(owner=B.proof_owner(), fencing_token=proof.fencing_token)
        zero = LeaderProof(owner=proof.owner, fencing_token=0)
        nil_boot = LeaderOwner(
            node_id=1, boot_id="0" * 8 + "-0000-0000-0000-" + "0" * 12, process_term=1
        )
        store.reset_log()
        for bad in (stale_next, foreign, zero, LeaderProof(owner=nil_boot, fencing_token=1)):
            with pytest.raises(Fenced):
                await record(leader, bad, 1)
        # LA-5: nothing is written by a proof that does not name the durable term.
        assert store.count("put") == 0
        assert await record_seqs(store) == [1]

    asyncio.run(main())


@LOCAL
def test_la_t48_delayed_outcome_fenced_by_takeover(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader, rival = open_leader(store, 1), open_leader(store, 2)
        proof = await elect(leader)
        gate = store.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            delayed = group.create_task(raises(record(leader, proof, 1)))
            await gate.wait_reached()
            rival_proof = await take_over(rival)  # wins sequence 2
            gate.release.set()
        assert isinstance(delayed.result(), Fenced)
        current = await head(rival)
        assert current.lease.seq == 2 and current.lease.owner == B
        assert rival_proof.fencing_token == 2
        assert await cluster_outcomes(rival) == ()
        assert await cluster_outcomes(leader) == ()

    asyncio.run(main())


@LOCAL
@pytest.mark.parametrize("winner", ["renewal", "catalog_seal", "floor_advance"])
def test_la_t49_delayed_outcome_retries_after_same_term_append(
    make_store: Callable[[], ObjectStore], winner: str
) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        base = 1
        if winner == "floor_advance":
            await record_all(leader, proof, [1, 2], commits=[1, 2])
            base = 3
        gate = store.pause_put(record_path(base + 1))
        async with asyncio.TaskGroup() as group:
            delayed = group.create_task(record(leader, proof, 5))
            await gate.wait_reached()
            if winner == "renewal":
                await leader.renew_exact(A, proof.fencing_token, deadline=deadline(leader))
            elif winner == "catalog_seal":
                await seal_catalog(leader, proof, manifest_of("t"), deadline=deadline(leader))
            else:
                assert (
                    await prune_cluster_outcomes_before(
                        leader, proof, 2, no_check, deadline=deadline(leader)
                    )
                    == 2
                )
            gate.release.set()
        outcome = created(delayed.result())
        current = await head(leader)
        assert current.lease.seq == base + 2  # the blocked sequence went to the same term
        assert current.checkpoint_outcome == outcome and outcome.epoch == 5
        if winner == "catalog_seal":
            assert current.lease.catalog_manifest == encode_and_reference(manifest_of("t"))[1]
        if winner == "floor_advance":
            floor = current.outcome_floor
            assert floor is not None and floor.artifact_before_epoch == 2
            assert floor == (await read_seq(store, base + 1)).outcome_floor
        assert [o.epoch for o in await cluster_outcomes(leader)][-1] == 5

    asyncio.run(main())


def test_la_t50_ambiguous_outcome_create(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        gate = store.pause_put(record_path(2), fail_after_apply=True)
        gate.release.set()  # do not hold it: apply, then lose the response
        outcome = unchanged(await record(leader, proof, 7))  # never Created (LA §11.2)
        assert outcome.epoch == 7
        assert await cluster_outcomes(open_leader(store, 2)) == (outcome,)
        assert await record_seqs(store) == [1, 2]
        assert (await head(leader)).checkpoint_outcome == outcome

    asyncio.run(main())


@LOCAL
def test_la_t51_ambiguous_outcome_compacted_before_reconcile(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await leader.require_decisions().load_or_create_deployment_id()
        gate = store.pause_put(HEAD_PATH)  # our record lands; our pointer update stalls
        async with asyncio.TaskGroup() as group:
            stalled = group.create_task(raises(record(leader, proof, 1)))
            await gate.wait_reached()
            # The same term moves on: repairs the pointer past record 2, then compacts epoch 1.
            await record_all(open_leader(store, 2), proof, range(2, 66))
            gate.release.set()
        error = stalled.result()
        assert isinstance(error, Refused), error
        assert "does not advance durable checkpoint 65" in str(error)
        ours = (await read_seq(store, 2)).checkpoint_outcome
        assert ours is not None and ours.epoch == 1  # the record still exists
        floor = (await head(leader)).outcome_floor
        assert floor is not None and floor.authority_before_epoch > 1
        assert await cluster_outcome(leader, 1) is None

    asyncio.run(main())


@LOCAL
def test_la_t52_non_advancing_checkpoint(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [5])
        store.reset_log()
        for epoch in (3, 4):
            with pytest.raises(Refused, match=f"cluster checkpoint {epoch} does not advance"):
                await record(leader, proof, epoch)
        with pytest.raises(Refused, match="canonical checkpoint ID"):
            await record_cluster_outcome(
                leader,
                proof,
                epoch=6,
                checkpoint_id=60,
                assignment_fence=FENCE,
                verdict=CheckpointVerdict.ABORT,
                recovery_capsule=None,
                deadline=deadline(leader),
            )
        assert store.count("put") == 0
        with pytest.raises(InvalidArgument, match="requires a recovery capsule"):
            await record_cluster_outcome(
                leader,
                proof,
                epoch=6,
                checkpoint_id=6,
                assignment_fence=FENCE,
                verdict=CheckpointVerdict.COMMIT,
                recovery_capsule=None,
                deadline=deadline(leader),
            )
        assert [o.epoch for o in await cluster_outcomes(leader)] == [5]

    asyncio.run(main())


@LOCAL
def test_la_t57_settlement_exact_or_dominator(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        assert await cluster_attempt_settlement(leader, CheckpointAttempt.canonical(1)) is None
        proof = await elect(leader)
        await record_all(leader, proof, [1, 3], commits=[3])
        one, three = await cluster_outcomes(leader)
        settle = cluster_attempt_settlement
        assert await settle(leader, CheckpointAttempt.canonical(1)) == one
        assert await settle(leader, CheckpointAttempt.canonical(2)) == three  # strict dominator
        assert await settle(leader, CheckpointAttempt.canonical(3)) == three
        assert await settle(leader, CheckpointAttempt.canonical(4)) is None
        with pytest.raises(Refused, match="canonical checkpoint ID"):
            await settle(leader, CheckpointAttempt(epoch=2, checkpoint_id=20))
        assert await highest_cluster_terminal_outcome(leader) == three
        inventory = await cluster_outcome_inventory(leader)
        assert inventory.outcomes == (one, three)
        assert inventory.retention_boundary.artifact_before_epoch == 0
        assert inventory.retention_boundary.terminal_anchor is None

    asyncio.run(main())


@LOCAL
def test_record_outcome_bounded_by_deadline(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        now = leader.clock.monotonic()
        with pytest.raises(DeadlineExceeded, match="before the operation started"):
            await record_cluster_outcome(
                leader,
                proof,
                epoch=1,
                checkpoint_id=1,
                assignment_fence=FENCE,
                verdict=CheckpointVerdict.ABORT,
                recovery_capsule=None,
                deadline=now,
            )
        gate = store.pause_put(record_path(2))  # the append hangs
        async with asyncio.TaskGroup() as group:
            hung = group.create_task(
                raises(
                    record_cluster_outcome(
                        leader,
                        proof,
                        epoch=1,
                        checkpoint_id=1,
                        assignment_fence=FENCE,
                        verdict=CheckpointVerdict.ABORT,
                        recovery_capsule=None,
                        deadline=now + 1.0,
                    )
                )
            )
            await gate.wait_reached()
            sim_clock(leader).advance(1.5)
        assert isinstance(hung.result(), DeadlineExceeded)
        gate.release.set()
        assert await record_seqs(store) == [1]  # the hung create never ran

    asyncio.run(main())
