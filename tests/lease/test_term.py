"""Lease operations (LA §4.3, LA §3.3; LA-T1 to LA-T15; invariants LA-4 to LA-10).

LA-T1 to LA-T11 run on memory, file and the S3 test server; the paused-race LA-T12 to LA-T15 on
memory and file. Each "process" has its own SimulatedClock (distinct seeds, so nonces differ):
takeover waits are simulated monotonic time, never real sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.codec.types import I64_MAX
from laminar_cluster.errors import DeadlineExceeded, Fenced, InvalidArgument
from laminar_cluster.lease import log
from laminar_cluster.lease.outcomes import (
    Acquired,
    AppendCreated,
    Held,
)
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX, record_path
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.lease.term import (
    acquire_or_renew_current_term,
    lease_grants_leadership,
    lease_grants_proof,
)
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from tests.lease.pausing_store import (
    TTL_S,
    A,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    counters,
    far_deadline,
    fault_record,
    held,
    lease_of,
    owner,
    record_seqs,
    renew,
    sim,
    takeover,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


def test_la_t01_empty_acquire(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        lease = acquired(await begin(authority(store, 1)))
        assert counters(lease) == (1, 1, 1)
        assert lease.owner == A
        pointer = await log.read_pointer(store)
        assert pointer is not None and pointer.sequence == 1

    asyncio.run(main())


def test_la_t02_exact_renew_keeps_token(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = authority(make_store(), 1, wall_start_ms=10)
        first = acquired(await begin(leader))
        assert first.expires_at_ms == 10 + 5_000
        renewed = acquired(await renew(leader, 1))
        assert counters(renewed) == (2, 2, 1)  # LA-4: renewal never advances the token
        assert renewed.owner == A
        assert await leader.load() == renewed

    asyncio.run(main())


def test_la_t03_counter_progression(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        incumbent, rival = authority(make_store(), 1), authority(make_store(), 2)
        assert counters(acquired(await begin(incumbent))) == (1, 1, 1)
        assert counters(acquired(await renew(incumbent, 1))) == (2, 2, 1)
        assert counters(acquired(await begin(incumbent))) == (3, 3, 2)
        seen = held(await begin(rival, B))
        observation = rival.observe_rival(B, seen)
        sim(rival).advance(TTL_S + 0.001)
        taken = acquired(await takeover(rival, observation))
        assert counters(taken) == (4, 4, 3)
        assert taken.owner == B
        # The deposed owner re-entering gets Held on the new term, never a fork (LA-6, LA-7).
        assert held(await begin(incumbent)) == taken
        with pytest.raises(Fenced, match="superseded by a rival owner"):
            await renew(incumbent, 2)

    asyncio.run(main())


def test_la_t04_renew_exact_missing_head(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = authority(make_store(), 1)
        with pytest.raises(Fenced, match="lost the durable authority head"):
            await renew(leader, 1)
        assert await leader.load() is None

    asyncio.run(main())


def test_la_t05_renew_exact_after_local_new_term(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = authority(make_store(), 1)
        assert acquired(await begin(leader)).token == 1
        assert acquired(await begin(leader)).token == 2  # LA-9: a new term rotates the token
        with pytest.raises(Fenced, match="superseded by a newer local term"):
            await renew(leader, 1)
        assert counters(await leader.load()) == (2, 2, 2)

    asyncio.run(main())


def test_la_t06_rival_blocked_while_live(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        incumbent, rival = authority(store, 1), authority(make_store(), 2)
        lease = acquired(await begin(incumbent))
        assert held(await begin(rival, B)) == lease
        assert await record_seqs(store) == [1]  # no write
        with pytest.raises(Fenced, match="superseded by a rival owner"):
            await renew(rival, 1, B)

    asyncio.run(main())


def test_la_t07_fast_rival_clock_cannot_steal(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        incumbent = authority(store, 1, ttl_s=0.02)
        rival = authority(make_store(), 2, ttl_s=0.02, wall_start_ms=I64_MAX - 30)
        lease = acquired(await begin(incumbent))
        # LA-7: the rival's wall clock is far past the incumbent's expires_at_ms: still Held.
        assert held(await begin(rival, B)) == lease
        observation = rival.observe_rival(B, lease)
        assert held(await takeover(rival, observation)) == lease
        assert await record_seqs(store) == [1]

    asyncio.run(main())


def test_la_t08_backward_owner_clock_still_invalidates(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        incumbent = authority(make_store(), 1, wall_start_ms=0)  # expiries in 1970
        rival = authority(make_store(), 2)
        first = acquired(await begin(incumbent))
        observation = rival.observe_rival(B, held(await begin(rival, B)))
        renewed = acquired(await renew(incumbent, 1))
        assert renewed.expires_at_ms == 5_000 < first.expires_at_ms + 1
        sim(rival).advance(TTL_S + 1)
        # The renewal changed the liveness identity: the stale observation cannot take over.
        assert held(await takeover(rival, observation)) == renewed

    asyncio.run(main())


def test_la_t09_full_observation_required(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        incumbent = authority(make_store(), 1)
        lease = acquired(await begin(incumbent))
        watched = PausingStore(make_store())
        rival = authority(watched, 2)
        observation = rival.observe_rival(B, lease)
        sim(rival).advance(TTL_S - 0.001)
        assert held(await takeover(rival, observation)) == lease
        assert watched.log == []  # LA-7: decided on the monotonic clock, without I/O
        sim(rival).advance(0.002)
        taken = acquired(await takeover(rival, observation))
        assert counters(taken) == (2, 2, 2)
        assert taken.owner == B

    asyncio.run(main())


def test_la_t10_same_node_new_boot_is_rival(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        old = owner(7, boot_n=1, term=3)
        new = owner(7, boot_n=2, term=4)
        incumbent, restarted = authority(make_store(), 1), authority(make_store(), 2)
        lease = acquired(await begin(incumbent, old))
        # LA-10: the same node with a new boot and term is a rival, not the same owner.
        assert held(await begin(restarted, new)) == lease
        observation = restarted.observe_rival(new, lease)
        sim(restarted).advance(TTL_S + 0.5)
        taken = acquired(await takeover(restarted, observation, new))
        assert counters(taken) == (2, 2, 2)
        assert taken.owner == new

    asyncio.run(main())


def test_la_t11_observe_self_rejected(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = authority(make_store(), 1)
        lease = acquired(await begin(leader))
        with pytest.raises(InvalidArgument, match="must belong to a rival"):
            leader.observe_rival(A, lease)

    asyncio.run(main())


@LOCAL
def test_la_t12_two_racers_one_winner(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        gate = store.pause_put(record_path(1), count=2)
        first, second = authority(store, 1), authority(store, 2)
        async with asyncio.TaskGroup() as group:
            racing = [group.create_task(begin(first, A)), group.create_task(begin(second, B))]
            await gate.wait_reached()  # both hold a Create of seq 1
            gate.release.set()
        outcomes = [task.result() for task in racing]
        winners = [o for o in outcomes if isinstance(o, Acquired)]
        losers = [o for o in outcomes if isinstance(o, Held)]
        assert len(winners) == 1 and len(losers) == 1
        assert losers[0].lease == winners[0].lease == await first.load()
        assert counters(winners[0].lease) == (1, 1, 1)

    asyncio.run(main())


@LOCAL
def test_la_t13_renewal_fenced_by_takeover(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        incumbent, rival = authority(paused, 1), authority(make_store(), 2)
        lease = acquired(await begin(incumbent))
        observation = rival.observe_rival(B, lease)
        sim(rival).advance(TTL_S + 0.5)
        gate = paused.pause_put(record_path(2))

        with pytest.raises(ExceptionGroup) as failed:
            async with asyncio.TaskGroup() as group:
                group.create_task(renew(incumbent, 1))
                await gate.wait_reached()
                taken = acquired(await takeover(rival, observation))
                assert counters(taken) == (2, 2, 2)
                gate.release.set()
        # LA-6: the delayed renewal is fenced; it never survives the takeover.
        assert failed.group_contains(Fenced, match="rival-owner CAS race")
        assert await rival.load() == taken

    asyncio.run(main())


@LOCAL
def test_la_t14_fault_append_does_not_reset_observation(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = make_store()
        incumbent, rival = authority(store, 1), authority(make_store(), 2)
        acquired(await begin(incumbent))
        observation = rival.observe_rival(B, held(await begin(rival, B)))
        head = await incumbent.load_published_head()
        assert head is not None
        fault = fault_record(head.record, reporter_node=9)
        assert await incumbent.append(head, fault) == AppendCreated()
        assert counters(fault.lease) == (2, 1, 1)
        sim(rival).advance(TTL_S + 0.5)
        taken = acquired(await takeover(rival, observation))
        assert counters(taken) == (3, 2, 2)
        record = await rival.load_record()
        assert record is not None and record.recovery_fault_slots == fault.recovery_fault_slots

    asyncio.run(main())


@LOCAL
def test_la_t15_fault_contention_cannot_starve_takeover(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        incumbent, rival = authority(make_store(), 1), authority(paused, 2)
        acquired(await begin(incumbent))
        observation = rival.observe_rival(B, held(await begin(rival, B)))
        sim(rival).advance(TTL_S + 0.5)
        gate = paused.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            taking = group.create_task(takeover(rival, observation))
            await gate.wait_reached()
            for reporter in (8, 9):  # faults at seq 2 and 3 under the old term
                head = await incumbent.load_published_head()
                assert head is not None
                assert await incumbent.append(head, fault_record(head.record, reporter)) == (
                    AppendCreated()
                )
            gate.release.set()
        taken = acquired(taking.result())
        assert counters(taken) == (4, 2, 2)
        assert taken.owner == B

    asyncio.run(main())


@LOCAL
def test_renew_exact_retries_after_same_term_append(make_store: Callable[[], ObjectStore]) -> None:
    """LA §4.3.2: a same-owner, same-token winner (a decision or fault append) means retry."""

    async def main() -> None:
        paused = PausingStore(make_store())
        leader, writer = authority(paused, 1), authority(make_store(), 2)
        acquired(await begin(leader))
        gate = paused.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            renewal = group.create_task(renew(leader, 1))
            await gate.wait_reached()
            head = await writer.load_published_head()
            assert head is not None
            assert await writer.append(head, fault_record(head.record, 5)) == AppendCreated()
            gate.release.set()
        assert counters(acquired(renewal.result())) == (3, 2, 1)

    asyncio.run(main())


def test_acquire_or_renew_current_term_preserves_token() -> None:
    async def main() -> None:
        leader = authority(ObstoreStore.memory(), 1)
        ctx, deadline = leader.context(), far_deadline(leader.clock)
        for expected in ((1, 1, 1), (2, 2, 1)):  # the same owner keeps token 1
            outcome = await acquire_or_renew_current_term(ctx, A, now_ms=0, deadline=deadline)
            assert counters(acquired(outcome)) == expected

    asyncio.run(main())


@pytest.mark.parametrize("ttl_s", [0, -1.0, 0.0015, float("nan"), float("inf")])
def test_ttl_checked_per_operation(ttl_s: float) -> None:
    async def main() -> None:
        leader = authority(ObstoreStore.memory(), 1, ttl_s=ttl_s)  # no check at construction
        with pytest.raises(InvalidArgument, match="lease TTL"):
            await begin(leader)
        with pytest.raises(InvalidArgument, match="lease TTL"):
            leader.observe_rival(A, lease_of(1, 1, 1, B))

    asyncio.run(main())


def test_invalid_owner_and_expiry_overflow_rejected() -> None:
    async def main() -> None:
        store = ObstoreStore.memory()
        leader = authority(store, 1)
        for bad in (owner(0), owner(3, term=0)):
            with pytest.raises(InvalidArgument, match="must be nonzero"):
                await begin(leader, bad)
        nil_boot = LeaderLeaseOwner(
            node=3, boot="00000000-0000-0000-0000-000000000000", process_term=1
        )
        with pytest.raises(InvalidArgument):
            await begin(leader, nil_boot)
        overflowing = authority(store, 2, wall_start_ms=I64_MAX - 30)  # ttl 5 s overflows
        with pytest.raises(InvalidArgument, match="expiry overflow"):
            await begin(overflowing)
        assert await store.list(RECORDS_PREFIX) == []

    asyncio.run(main())


def test_deadline_bounds_a_hung_operation() -> None:
    """A store call that never returns ends in DeadlineExceeded at the caller's deadline."""

    async def main() -> None:
        paused = PausingStore(ObstoreStore.memory())
        leader = authority(paused, 1)
        gate = paused.pause_get(HEAD_PATH)
        deadline = leader.clock.monotonic() + 1.0
        with pytest.raises(ExceptionGroup) as failed:
            async with asyncio.TaskGroup() as group:
                group.create_task(leader.begin_new_term(A, deadline=deadline))
                await gate.wait_reached()
                sim(leader).advance(1.0)
        assert failed.group_contains(DeadlineExceeded, match="deadline passed")
        with pytest.raises(DeadlineExceeded):  # already past: fails before any I/O
            await leader.begin_new_term(A, deadline=deadline)

    asyncio.run(main())


def test_grant_predicates() -> None:
    lease = lease_of(3, 3, 2, A)
    proof = lease.proof()
    assert lease_grants_leadership(lease, A, True)
    assert not lease_grants_leadership(lease, A, False)
    assert not lease_grants_leadership(None, A, True)
    assert not lease_grants_leadership(lease, B, True)
    assert not lease_grants_leadership(lease, owner(1, term=2), True)
    assert lease_grants_proof(lease, A, True, proof)
    assert not lease_grants_proof(lease, A, False, proof)
    assert not lease_grants_proof(None, A, True, proof)
    rotated = lease_of(4, 4, 3, A)
    assert not lease_grants_proof(rotated, A, True, proof)  # LA-9: a stale proof fails
    foreign = lease_of(3, 3, 2, B).proof()
    assert not lease_grants_proof(lease, A, True, foreign)
