"""History pruning (LA §4.8.2 to LA §4.8.4; LA-T86 to LA-T90 and the prune halves
of 40 and 42; invariants LA-2, LA-21).

Object ages follow a SimulatedClock (`prune_support.StampingStore`). LA-T86 and LA-T88 run on
memory, file and the S3 test server; the rest on memory and file. Failure paths and the
background scheduler are in test_prune_failures.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    audit_assignment_decisions,
    prune_assignment_drain_decisions_before,
    record_assignment_drain_decision,
)
from laminar_cluster.authority.outcome_audit import audit_outcomes
from laminar_cluster.authority.prune import PruneScheduler, grace_ms_for, prune_history
from laminar_cluster.authority.recovery_release import terminal_path
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.paths import RECORDS_PREFIX, RELEASE_TERMINALS_PREFIX, record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.store import CREATE, ObjectStore
from laminar_cluster.views.authority_audit import audit_authority
from laminar_cluster.views.lease import decisions_of
from tests.authority.assignment_support import drain
from tests.authority.prune_support import (
    HOUR_S,
    LOCAL,
    StampingStore,
    compacted_history,
    counters_of,
    leader_of,
    lease_history,
    orphan_terminal,
    prune,
    release_cycle,
    stamped,
    terminal_paths,
)
from tests.lease.pausing_store import (
    acquired,
    begin,
    far_deadline,
    pointer_seq,
    put_record,
    record_seqs,
    renew,
    set_pointer,
)


@pytest.mark.parametrize("backend", ["memory", "file", "s3"])
def test_la_t86_grace_period(make_store: Callable[[], ObjectStore], backend: str) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store, ttl_s=0.001)  # grace = 2 ms
        scheduler = PruneScheduler(leader)
        async with scheduler.running():
            assert leader.prune_hook == scheduler.request
            lease = acquired(await begin(leader))
            for _ in range(8):  # 9 lease records, all younger than the grace
                lease = acquired(await renew(leader, lease.token))
                await scheduler.wait_idle()
            assert lease.seq == 9 and scheduler.started >= 1
            assert await record_seqs(store) == list(range(1, 10))
            store.clock.advance(0.001)  # every record is 1 ms old: still within the grace
            scheduler.request()
            await scheduler.wait_idle()
            assert await record_seqs(store) == list(range(1, 10))
            store.clock.advance(0.001)  # 2 ms old: at the grace, so eligible
            scheduler.request()
            await scheduler.wait_idle()
            assert await record_seqs(store) == [8, 9]  # LA-2: head and head-1 stay
            assert scheduler.failed == 0 and scheduler.last_report is not None
            assert scheduler.last_report.deleted_records == tuple(range(1, 8))
        assert leader.prune_hook is None
        assert await pointer_seq(store) == 9

    asyncio.run(main())


@LOCAL
def test_la_t87_prune_never_deletes_at_or_above_snapshot_head(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        lease = await lease_history(leader, 3)
        store.clock.advance(HOUR_S)
        appender = leader_of(store)

        async def append_after_snapshot(prefix: str) -> None:
            if prefix == RECORDS_PREFIX and store.before_list is not None:
                store.before_list = None
                acquired(await renew(appender, lease.token))  # record 4, after the snapshot
                store.stamps[record_path(4)] = 0  # as old as can be: age alone must not matter

        store.before_list = append_after_snapshot
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        assert report.head_seq == 3
        assert report.retained == frozenset({2, 3})
        assert report.deleted_records == (1,)  # 2 is head-1; 3 and 4 are >= the snapshot head
        assert await record_seqs(store) == [2, 3, 4]
        assert await pointer_seq(store) == 4

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["memory", "file", "s3"])
def test_la_t88_prune_lists_once_keeps_pointer_and_recent(
    make_store: Callable[[], ObjectStore], backend: str
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store, ttl_s=5.0)  # grace 10 s
        lease = await lease_history(leader, 5)
        store.clock.advance(20.0)
        while lease.seq < 8:
            lease = acquired(await renew(leader, lease.token))
        store.clock.advance(5.0)  # 1..5 are 25 s old, 6..8 are 5 s old
        store.lists.clear()
        assert await prune(leader) == (1, 2, 3, 4, 5)
        assert store.lists == Counter({RECORDS_PREFIX: 1})  # one LIST; no release to collect
        assert await record_seqs(store) == [6, 7, 8]
        assert await pointer_seq(store) == 8  # the pointer object is never a candidate
        assert counters_of(await leader.load()) == (8, 8, 1)
        assert await prune(leader) == ()  # nothing old is left

    asyncio.run(main())


@LOCAL
def test_la_t89_prune_keeps_latest_release_admission_and_collects_orphan_terminals(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        lease = acquired(await begin(leader))  # seq 1
        ref1 = await release_cycle(leader, lease, 5, 1)  # fault seq 2, release seq 3
        abandoned = await orphan_terminal(leader, lease, 1, 91)  # never committed
        future = await orphan_terminal(leader, lease, 2, 92)  # staged for a later commit
        while lease.seq < 6:
            lease = acquired(await renew(leader, lease.token))
        store.clock.advance(HOUR_S)
        young = await orphan_terminal(leader, lease, 1, 93)  # staged just now
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        assert report.retained == frozenset({3, 5, 6})  # the admission, head-1, head
        assert report.deleted_records == (1, 2, 4)
        assert report.deleted_terminals == (abandoned,)
        assert await terminal_paths(store) == {terminal_path(ref1), future, young}
        # A newer release supersedes the first: its admission and older terminals go.
        ref3 = await release_cycle(leader, lease, 6, 3)  # fault seq 7, release seq 8
        lease = acquired(await renew(leader, lease.token))  # seq 9
        store.clock.advance(HOUR_S)
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        assert report.retained == frozenset({8, 9})
        assert report.deleted_records == (3, 5, 6, 7)
        assert await terminal_paths(store) == {terminal_path(ref3)}
        assert set(report.deleted_terminals) == {terminal_path(ref1), future, young}

    asyncio.run(main())


async def compacted_head(
    make_store: Callable[[], ObjectStore],
) -> tuple[StampingStore, LeaderLeaseStore, LeaderAuthorityRecord]:
    """`compacted_history` on a fresh stamped store, with the head it left."""
    store = stamped(make_store)
    leader, _ = await compacted_history(store)
    head = await leader.load_record()
    assert head is not None
    return store, leader, head


@LOCAL
def test_la_t90_history_prune_keeps_live_chain_drops_compacted(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store, leader, head = await compacted_head(make_store)
        assert head.outcome_floor is not None
        assert head.outcome_floor.authority_before_epoch == 3
        store.clock.advance(HOUR_S)
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        # Live terminal chain e5@9, e4@6, e3@5; live Commit chain e3@5; head 10, head-1 9.
        assert report.retained == frozenset({5, 6, 9, 10})
        assert report.deleted_records == (1, 2, 3, 4, 7, 8)
        assert await record_seqs(store) == [5, 6, 9, 10]
        # The anchors live on by value: a fresh audit still sees every outcome.
        fresh = leader_of(store, decisions=True)
        snapshot = await audit_outcomes(fresh, head)
        assert [o.epoch for o in snapshot.outcomes] == [1, 2, 3, 4, 5]
        assert await prune(fresh) == ()
        # The read-only `authority` audit agrees: the chains meet their floor anchors.
        audit = await audit_authority(store, store.clock)
        assert audit.ok, audit.problems
        assert sorted(link.sequence for link in audit.live_outcomes) == [5, 6, 9]
        assert [link.sequence for link in audit.live_commits] == [5]
        assert decisions_of(audit)["outcome_floor"] == {
            "authority_before_epoch": 3,
            "artifact_before_epoch": 3,
            "terminal_anchor_epoch": 2,
            "committed_anchor_epoch": 1,
        }

    asyncio.run(main())


@LOCAL
def test_la_t42_rewritten_floor_anchor_link_prune_deletes_nothing(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store, _, head = await compacted_head(make_store)
        floor = head.outcome_floor
        assert floor is not None
        assert floor.terminal_anchor_link is not None
        bad_link = msgspec.structs.replace(floor.terminal_anchor_link, sequence=4)
        edited = msgspec.structs.replace(
            head,
            lease=msgspec.structs.replace(head.lease, seq=11),
            outcome_floor=msgspec.structs.replace(floor, terminal_anchor_link=bad_link),
        )
        await put_record(store, edited)  # a hand-edited, individually valid record
        await set_pointer(store, 11)
        store.clock.advance(HOUR_S)
        with pytest.raises(CorruptRecord) as caught:
            await prune_history(leader_of(store, decisions=True), 1)
        assert caught.value.key == record_path(11)
        assert store.deleted == []
        assert await record_seqs(store) == list(range(1, 12))
        audit = await audit_authority(store, store.clock)
        assert [(p.object, p.error) for p in audit.problems] == [
            (record_path(11), "terminal outcome floor does not anchor the retained authority chain")
        ]

    asyncio.run(main())


@LOCAL
def test_la_t40_stray_object_fails_prune_closed(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        await lease_history(leader, 4)
        await store.put(f"{RECORDS_PREFIX}garbage.txt", b"x", CREATE)
        store.clock.advance(HOUR_S)
        with pytest.raises(CorruptRecord) as caught:
            await prune(leader)
        assert caught.value.key == f"{RECORDS_PREFIX}garbage.txt"
        await store.delete(f"{RECORDS_PREFIX}garbage.txt")
        await store.put(f"{RELEASE_TERMINALS_PREFIX}stray.json", b"x", CREATE)
        assert store.deleted == [f"{RECORDS_PREFIX}garbage.txt"]
        assert await prune(leader) == (1, 2)  # no retained release: the terminal GC is not run

    asyncio.run(main())


@LOCAL
def test_la_t68_prune_keeps_live_assignment_chain_drops_below_floor(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        lease = acquired(await begin(leader))  # seq 1
        proof = lease.proof()
        deadline = far_deadline(leader.clock)
        for target in (2, 3, 4, 5):  # seqs 2..5
            decision = drain(target, proof)
            result = await record_assignment_drain_decision(
                leader, proof, decision, deadline=deadline
            )
            assert isinstance(result, DecisionCreated)
        assert (
            await prune_assignment_drain_decisions_before(leader, proof, 4, deadline=deadline) == 4
        )
        lease = acquired(await renew(leader, lease.token))  # seq 7 (the floor is seq 6)
        store.clock.advance(HOUR_S)
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        # Live decisions v4@4 and v5@5; the anchor v3 lives on by value in the floor.
        assert report.retained == frozenset({4, 5, 6, 7})
        assert report.deleted_records == (1, 2, 3)
        head = await leader.load_record()
        assert head is not None
        assert [
            link.target_version for link, _ in await audit_assignment_decisions(leader, head)
        ] == [4, 5]

    asyncio.run(main())
