"""The decisions' invariants, one test each (docs/protocols/leader-authority.md LA-13, LA-14,
LA-16, LA-17, LA-18; LA-5 is `test_admission.py`'s, LA-15, LA-19, LA-20 and LA-21 are tested
beside their features).

The real LeaderLeaseStore and DecisionStore on memory://, one SimulatedClock per process;
races are concurrent calls of separate processes (cold caches) in one event loop.
"""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.authority.catalog import (
    SealCreated,
    load_sealed_catalog_manifest,
    seal_catalog,
)
from laminar_cluster.authority.cluster_outcomes import (
    cluster_attempt_settlement,
    cluster_outcome,
    cluster_outcomes,
    highest_cluster_committed_outcome,
    prune_cluster_outcomes_before,
)
from laminar_cluster.authority.prune import prune_history
from laminar_cluster.authority.recovery_faults import (
    Active,
    record_recovery_fault,
    recovery_fault_inventory,
)
from laminar_cluster.authority.recovery_release import (
    FaultsChanged,
    ReleaseCreated,
    authorize_recovery_release,
    record_recovery_release_commit,
    stage_recovery_release_terminal,
)
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    Conflict,
    Created,
)
from laminar_cluster.errors import CorruptRecord, Fenced, Refused
from laminar_cluster.lease.log import read_record
from laminar_cluster.store import open_store
from tests.authority.recovery_support import (
    manifest_of,
    publisher,
    round_of,
    settle,
    terminal_of,
)
from tests.authority.test_cluster_outcome_helpers import (
    deadline,
    elect,
    head,
    open_leader,
    read_seq,
    record,
    record_all,
    record_seqs,
    replace,
    rewrite,
    take_over,
)
from tests.lease.pausing_store import acquired, begin, renew


async def no_artifact_check(_: CheckpointOutcome) -> None:
    return None


def test_la13_racing_terms_leave_one_outcome_per_epoch() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader, twin = open_leader(store, 1), open_leader(store, 2)
        proof = await elect(leader)
        await record_all(leader, proof, [1, 2], commits=[1])
        # Two processes of the same term decide epoch 3 differently, at once.
        results = await asyncio.gather(
            record(leader, proof, 3, commit=True), record(twin, proof, 3)
        )
        durable = await cluster_outcome(twin, 3)
        assert durable is not None
        assert sum(isinstance(r, Created) for r in results) == 1
        for result in results:  # every caller is told the one durable outcome
            told = result.winner if isinstance(result, Conflict) else result.outcome
            assert told == durable
        # A newer term exists: the old one admits nothing more; the new one goes on.
        rival = open_leader(store, 3)
        new = await take_over(rival)
        with pytest.raises(Fenced):
            await record(leader, proof, 4)
        assert isinstance(await record(rival, new, 4, commit=True), Created)
        with pytest.raises(Fenced):  # a deposed term's retry learns nothing new ...
            await record(leader, proof, 3)
        assert await cluster_outcome(rival, 3) == durable  # ... and changes nothing
        outcomes = await cluster_outcomes(rival)
        assert [o.epoch for o in outcomes] == [1, 2, 3, 4]
        ids = [o.checkpoint_id for o in outcomes]
        assert ids == sorted(set(ids))  # strictly increasing
        # Every admitting record carries its own term's proof, and the Commit chain holds
        # exactly the Commits of the terminal chain.
        last = await head(rival)
        commits = []
        for seq in range(1, last.lease.seq + 1):
            admitted = await read_record(store, seq)
            assert admitted is not None
            outcome = admitted.checkpoint_outcome
            if outcome is None:
                continue
            assert outcome.leader_proof == admitted.lease.proof()
            if outcome.is_commit():
                assert admitted.commit_head == admitted.outcome_head
                commits.append(outcome.epoch)
        assert commits == [o.epoch for o in outcomes if o.is_commit()]
        assert last.commit_head is not None and last.commit_head.epoch == commits[-1]

    asyncio.run(main())


def test_la14_a_live_recovery_cut_always_remains() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [1, 2, 3, 4], commits=[1, 2])
        with pytest.raises(Refused, match="no live commit recovery cut"):
            await prune_cluster_outcomes_before(
                leader, proof, 3, no_artifact_check, deadline=deadline(leader)
            )
        assert (
            await prune_cluster_outcomes_before(
                leader, proof, 2, no_artifact_check, deadline=deadline(leader)
            )
            == 2
        )
        await record_all(leader, proof, range(5, 71))  # 66 more Aborts: compaction
        floor = (await head(leader)).outcome_floor
        assert floor is not None and floor.authority_before_epoch > 2
        assert floor.artifact_before_epoch == 2  # compaction never moves the artifact floor
        await prune_history(leader, 0)  # the compacted records go
        cut = await highest_cluster_committed_outcome(open_leader(store, 2))
        assert cut is not None and cut.epoch == 2  # the recovery cut survived all of it
        for epoch in (1, 3, 4):  # "is attempt X closed?" stays answerable by anchors
            attempt = CheckpointAttempt(epoch=epoch, checkpoint_id=epoch)
            settled = await cluster_attempt_settlement(open_leader(store, 3), attempt)
            assert settled is not None and settled.epoch >= epoch

    asyncio.run(main())


def test_la16_a_release_clears_only_the_faults_it_froze() -> None:
    async def main() -> None:
        for fault_first in (True, False):
            store = open_store("memory://")
            leader = open_leader(store, 1)
            lease = acquired(await begin(leader))
            await record_recovery_fault(leader, publisher(5), 1, deadline=deadline(leader))
            frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
            terminal = terminal_of(frozen)
            ref = await stage_recovery_release_terminal(leader, terminal)
            reporter = open_leader(store, 2)
            late = record_recovery_fault(reporter, publisher(6), 1, deadline=deadline(reporter))
            release = record_recovery_release_commit(
                leader, lease.proof(), ref, deadline=deadline(leader)
            )
            if fault_first:
                reported, released = await asyncio.gather(late, release)
            else:
                released, reported = await asyncio.gather(release, late)
            assert isinstance(reported, Active)
            assert isinstance(released, FaultsChanged | ReleaseCreated)
            inventory = await recovery_fault_inventory(leader)
            # Node 6's fault is never cleared by a round that did not freeze it ...
            assert 6 in {fault.reporter for fault in inventory.faults}
            # ... and nobody may resume while it is active.
            assert not await authorize_recovery_release(leader, publisher(5), terminal)
            assert not await authorize_recovery_release(leader, publisher(6), terminal)

    asyncio.run(main())


def test_la17_racing_seals_seal_once() -> None:
    async def main() -> None:
        store = open_store("memory://")
        first, second = open_leader(store, 1), open_leader(store, 2)
        proof = await elect(first)
        orders, users = manifest_of("orders"), manifest_of("users")
        results = await asyncio.gather(
            settle(seal_catalog(first, proof, orders, deadline=deadline(first))),
            settle(seal_catalog(second, proof, users, deadline=deadline(second))),
        )
        assert sum(isinstance(r, SealCreated) for r in results) == 1
        assert sum(isinstance(r, Refused) for r in results) == 1  # the other never lands
        sealed = await load_sealed_catalog_manifest(first)
        assert sealed in (orders, users)
        lease = (await head(first)).lease
        acquired(await renew(first, lease.token))
        rival = open_leader(store, 3)
        await take_over(rival)
        assert await load_sealed_catalog_manifest(rival) == sealed  # never changes afterwards

    asyncio.run(main())


def test_la18_the_prune_keeps_the_head_and_every_live_chain_record() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [1, 2, 3], commits=[1])
        lease = (await head(leader)).lease
        for _ in range(4):
            acquired(await renew(leader, lease.token))  # renewal-only records: collectable
        before = await record_seqs(store)
        await prune_history(leader, 0)
        kept = await record_seqs(store)
        top = (await head(leader)).lease.seq
        assert {top, top - 1} <= set(kept)  # the head and head - 1
        assert {2, 3, 4} <= set(kept)  # the records admitting the live outcomes 1, 2, 3
        assert set(kept) < set(before)  # and only renewals went
        # A broken chain deletes nothing at all.
        edited = replace(await read_seq(store, 4), previous_outcome=None)
        await rewrite(store, edited)
        acquired(await renew(leader, lease.token))
        acquired(await renew(leader, lease.token))
        untouched = await record_seqs(store)
        with pytest.raises(CorruptRecord):
            await prune_history(open_leader(store, 2), 0)  # a cold process reads the chain
        assert await record_seqs(store) == untouched

    asyncio.run(main())
