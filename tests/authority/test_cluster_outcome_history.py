"""Outcome chains and their compaction (LA §3.5, LA §4.4.3, LA §4.4.6, LA §4.8.2;
LA-T42 to LA-T44 and LA-T53 to LA-T56; invariants LA-13, LA-14, LA-11, LA-21).

LA-T42 to LA-T44 hand-edit durable records (each edit is valid on its own, so only the chain audit
can see it) and write them over the original, bypassing the create-only rule on purpose. LA-T53 to
LA-T56 build long histories: Aborts where the scenario allows, real capsules for Commits, and for
LA-T56 a 4096-Commit history written record by record. "Prune and restart" is the real history prune
followed by a fresh authority instance (empty audit cache) on the same store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import (
    audit_outcomes,
    cluster_attempt_settlement,
    cluster_outcome,
    cluster_outcome_inventory,
    cluster_outcomes,
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
    prune_cluster_outcomes_before,
)
from laminar_cluster.authority.outcome_audit import OutcomeSnapshot, audit_cache, audit_key
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    RecoveryCapsuleRef,
)
from laminar_cluster.errors import CorruptRecord, Refused
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease, OutcomeLink
from laminar_cluster.lease.validate import encode_record
from laminar_cluster.store import CREATE, ObjectStore
from tests.authority.test_cluster_outcome_helpers import (
    FENCE,
    A,
    PausingStore,
    conflict,
    created,
    deadline,
    elect,
    head,
    open_leader,
    prune_now,
    read_seq,
    record,
    record_all,
    record_gets,
    record_seqs,
    replace,
    rewrite,
)
from tests.lease.pausing_store import set_pointer

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


async def no_check(_: CheckpointOutcome) -> None:
    return None


async def cached_snapshot(leader: LeaderLeaseStore) -> OutcomeSnapshot:
    """The snapshot cached for the current head (it must be there)."""
    current = await head(leader)
    snapshot = audit_cache(leader).lookup(audit_key(current), current.lease.seq)
    assert snapshot is not None
    return snapshot


@LOCAL
def test_la_t42_rewritten_floor_anchor_link(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, range(1, 66))  # compaction before epoch 65
        current = await head(leader)
        floor = current.outcome_floor
        assert floor is not None and floor.terminal_anchor_link is not None
        link = floor.terminal_anchor_link
        edited_link = replace(link, sequence=link.sequence + 1)
        await rewrite(
            store, replace(current, outcome_floor=replace(floor, terminal_anchor_link=edited_link))
        )
        before = await record_seqs(store)
        cold = open_leader(store, 2)
        with pytest.raises(CorruptRecord, match="does not meet durable floor"):
            await cluster_outcomes(cold)
        with pytest.raises(CorruptRecord, match="does not meet durable floor"):
            await cluster_attempt_settlement(cold, CheckpointAttempt.canonical(3))
        with pytest.raises(CorruptRecord, match="does not meet durable floor"):
            await record(cold, proof, 66)
        # LA-11: the prune proves the chains before deleting anything, and cannot.
        with pytest.raises(CorruptRecord):
            await prune_now(cold)
        assert await record_seqs(store) == before

    asyncio.run(main())


@LOCAL
def test_la_t43_rewritten_outcome_back_link(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [1, 2, 3])  # records 2, 3, 4
        await leader.renew_exact(A, proof.fencing_token, deadline=deadline(leader))  # head 5
        third = await read_seq(store, 4)
        assert third.previous_outcome == OutcomeLink(sequence=3, epoch=2, checkpoint_id=2)
        await rewrite(
            store,
            replace(third, previous_outcome=OutcomeLink(sequence=2, epoch=2, checkpoint_id=2)),
        )
        cold = open_leader(store, 2)
        assert await cluster_outcome(cold, 3) is not None  # above the edit: still readable
        with pytest.raises(CorruptRecord, match="does not match its authority record") as caught:
            await cluster_outcome(cold, 1)
        assert caught.value.key is not None and caught.value.key.endswith("v0000000000000002.json")
        with pytest.raises(CorruptRecord, match="does not match its authority record"):
            await cluster_outcomes(cold)

    asyncio.run(main())


@LOCAL
def test_la_t44_commit_link_to_abort(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [1, 2, 3], commits=[1, 3])  # records 2, 3, 4
        await leader.renew_exact(A, proof.fencing_token, deadline=deadline(leader))
        third = await read_seq(store, 4)
        assert third.previous_commit == OutcomeLink(sequence=2, epoch=1, checkpoint_id=1)
        abort_link = OutcomeLink(sequence=3, epoch=2, checkpoint_id=2)
        await rewrite(store, replace(third, previous_commit=abort_link))
        cold = open_leader(store, 2)
        with pytest.raises(CorruptRecord, match="did not preserve the exact Commit head"):
            await cluster_outcomes(cold)
        with pytest.raises(CorruptRecord, match="did not preserve the exact Commit head"):
            await highest_cluster_committed_outcome(cold)
        with pytest.raises(CorruptRecord):
            await prune_now(cold)
        assert len(await record_seqs(store)) == 5

    asyncio.run(main())


@LOCAL
def test_la_t53_automatic_compaction(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, range(1, 66))
        floor = (await head(leader)).outcome_floor
        assert floor is not None
        # 64 live links before epoch 65: keep the newest 16 (49..64), anchor the greatest below.
        assert floor.authority_before_epoch == 49 and floor.artifact_before_epoch == 0
        anchor = floor.terminal_anchor
        assert anchor is not None and anchor.epoch == 48
        assert anchor.verdict is CheckpointVerdict.ABORT
        assert floor.committed_anchor is None and floor.committed_anchor_link is None
        # The snapshots the appends installed in the cache are exactly what an audit finds.
        assert await cached_snapshot(leader) == await audit_outcomes(leader, await head(leader))
        deleted = await prune_now(leader)
        assert set(deleted) == set(range(1, 50))  # epochs 1..48 and the first lease record
        restarted = open_leader(store, 2)
        assert await cluster_outcome(restarted, 48) == anchor  # LA-14: the anchor is by value
        assert await cluster_outcome(restarted, 47) is None
        assert await cluster_outcome(restarted, 1) is None
        dominator = await cluster_attempt_settlement(restarted, CheckpointAttempt.canonical(1))
        assert dominator is not None and dominator.epoch == 65
        settled = await cluster_attempt_settlement(restarted, CheckpointAttempt.canonical(48))
        assert settled == anchor
        assert [o.epoch for o in await cluster_outcomes(restarted)] == [48, *range(49, 66)]
        terminal = await highest_cluster_terminal_outcome(restarted)
        assert terminal is not None and terminal.epoch == 65

    asyncio.run(main())


@LOCAL
def test_la_t54_lagged_commit_survives_compaction(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        commit = created(await record(leader, proof, 1, commit=True))
        await record_all(leader, proof, range(2, 66))
        floor = (await head(leader)).outcome_floor
        assert floor is not None and floor.authority_before_epoch == 49
        assert floor.artifact_before_epoch == 0  # compaction never authorises artifact GC
        deleted = await prune_now(leader)
        assert 2 not in deleted  # the lagged Commit's record stays on the live Commit chain
        restarted = open_leader(store, 2)
        assert await highest_cluster_committed_outcome(restarted) == commit
        assert await cluster_outcome(restarted, 1) == commit
        assert await cluster_outcome(restarted, 2) is None  # a compacted Abort
        assert conflict(await record(restarted, proof, 1)) == commit  # LA-13: still decided

    asyncio.run(main())


@LOCAL
def test_la_t55_mixed_history_260(make_store: Callable[[], ObjectStore]) -> None:
    commits = {1, 2, 50, 100, 150, 190, 193, 200, 230, 260}

    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, range(1, 261), commits=commits)
        cold = open_leader(store, 2)
        inventory = await cluster_outcome_inventory(cold)
        assert [o.epoch for o in inventory.outcomes if o.is_commit()] == sorted(commits)
        floor = (await head(cold)).outcome_floor
        assert floor is not None and floor.artifact_before_epoch == 0
        snapshot = await audit_outcomes(cold, await head(cold))
        commit_seqs = {link.sequence for link in snapshot.commit_links}
        assert [link.epoch for link in snapshot.commit_links] == sorted(commits)
        # A cold exact lookup of a lagged Commit reads only the Commit chain (and the head).
        lookup = open_leader(store, 3)
        store.reset_log()
        found = await cluster_outcome(lookup, 50)
        assert found is not None and found.epoch == 50 and found.is_commit()
        current = (await head(cold)).lease.seq
        walked = record_gets(store) - {current, current + 1}
        seqs = {link.epoch: link.sequence for link in snapshot.commit_links}
        assert walked == {seqs[e] for e in (50, 100, 150, 190, 193, 200, 230, 260)} - {current}
        assert walked <= commit_seqs
        assert (
            await prune_cluster_outcomes_before(
                leader, proof, 194, no_check, deadline=deadline(leader)
            )
            == 194
        )
        advanced = (await head(leader)).outcome_floor
        assert advanced is not None and advanced.artifact_before_epoch == 194
        assert advanced.committed_anchor is not None and advanced.committed_anchor.epoch == 193
        assert await cached_snapshot(leader) == await audit_outcomes(leader, await head(leader))
        deleted = set(await prune_now(leader))
        assert {seqs[e] for e in commits if e < 194} <= deleted
        assert not {seqs[e] for e in commits if e >= 194} & deleted
        restarted = open_leader(store, 4)
        assert [o.epoch for o in await cluster_outcomes(restarted) if o.is_commit()] == [
            200,
            230,
            260,
        ]
        assert await cluster_outcome(restarted, 193) is None  # below the artifact floor
        settled = await cluster_attempt_settlement(restarted, CheckpointAttempt.canonical(193))
        assert settled is not None and settled.epoch == 193  # the committed anchor

    asyncio.run(main())


def _commit_record(seq: int, deployment_id: str) -> LeaderAuthorityRecord:
    """A hand-built Commit of epoch `seq` at sequence `seq` (term 1 of owner A): the capsule
    reference is never loaded by the audit."""
    link = OutcomeLink(sequence=seq, epoch=seq, checkpoint_id=seq)
    previous = (
        None if seq == 1 else OutcomeLink(sequence=seq - 1, epoch=seq - 1, checkpoint_id=seq - 1)
    )
    lease = LeaderLease(
        seq=seq, renewal_sequence=1, token=1, owner=A, expires_at_ms=0, catalog_manifest=None
    )
    outcome = CheckpointOutcome(
        version=2,
        scope=CheckpointScope.CLUSTER,
        epoch=seq,
        checkpoint_id=seq,
        deployment_id=deployment_id,
        assignment_fence=FENCE,
        leader_proof=lease.proof(),
        recovery_capsule=RecoveryCapsuleRef(epoch=seq, checkpoint_id=seq, sha256="ab" * 32, len=9),
        verdict=CheckpointVerdict.COMMIT,
    )
    return replace(
        LeaderAuthorityRecord.initial(lease),
        checkpoint_outcome=outcome,
        previous_outcome=previous,
        outcome_head=link,
        previous_commit=previous,
        commit_head=link,
    )


@pytest.mark.parametrize("backend", ["memory"])
def test_la_t56_commit_capacity(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = open_leader(store, 1)
        deployment_id = await leader.require_decisions().load_or_create_deployment_id()
        for seq in range(1, MAX_LIVE_AUTHORITY_LINKS + 1):
            record_ = _commit_record(seq, deployment_id)
            await store.inner.put(record_path(seq), encode_record(record_), CREATE)
        await set_pointer(store.inner, MAX_LIVE_AUTHORITY_LINKS)
        proof = (await head(leader)).lease.proof()
        nxt = MAX_LIVE_AUTHORITY_LINKS + 1
        store.reset_log()
        with pytest.raises(Refused, match="advance the artifact-retention horizon"):
            await record(leader, proof, nxt, commit=True)
        assert store.count("put", record_path(nxt)) == 0  # LA-21: nothing appended
        assert (await head(leader)).lease.seq == MAX_LIVE_AUTHORITY_LINKS
        # An Abort needs no Commit capacity: it compacts the terminal history, then lands.
        assert created(await record(leader, proof, nxt)).epoch == nxt
        current = await head(leader)
        assert current.lease.seq == nxt + 1
        assert current.outcome_floor is not None
        assert current.outcome_floor.authority_before_epoch == MAX_LIVE_AUTHORITY_LINKS - 15
        assert current.outcome_floor.artifact_before_epoch == 0
        highest = await highest_cluster_committed_outcome(leader)
        assert highest is not None and highest.epoch == MAX_LIVE_AUTHORITY_LINKS
        with pytest.raises(Refused, match="advance the artifact-retention horizon"):
            await record(leader, proof, nxt + 1, commit=True)

    asyncio.run(main())
