"""The lease's invariants, one test each (docs/protocols/leader-authority.md LA-1 .. LA-12).

Each runs the real LeaderLeaseStore on memory:// (one SimulatedClock per process, so nonces and
time are replayable) and fails if its invariant breaks. The scenario tests (test_la_tNN_...)
check the same rules at the points the spec's scenarios name; these check the rule itself.
"""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.authority.prune import prune_history
from laminar_cluster.authority.recovery_faults import record_recovery_fault
from laminar_cluster.errors import CorruptRecord, Fenced
from laminar_cluster.lease import log
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.outcomes import (
    Acquired,
    AppendContended,
    AppendCreated,
    Held,
    VersionedPointer,
)
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.lease.term import lease_grants_proof
from laminar_cluster.lease.validate import encode_record
from laminar_cluster.store import CREATE, OVERWRITE, IfMatch, PutMode, PutResult, open_store
from laminar_cluster.store.obstore_backend import ObstoreStore
from laminar_cluster.store.probe import StoreContractViolated
from tests.authority.recovery_support import publisher, settle
from tests.lease.manager_sim import SimClock, drive
from tests.lease.manager_support import RENEW, TTL, real_authority, running
from tests.lease.manager_support import owner as process_owner
from tests.lease.pausing_store import (
    TTL_S,
    A,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    far_deadline,
    fault_record,
    held,
    owner,
    pointer_seq,
    put_record,
    record_at,
    record_seqs,
    renew,
    set_pointer,
    sim,
    takeover,
)

FAR_FUTURE_MS = 4_000_000_000_000  # a wall clock in 2096: every object looks old


async def published(leader: LeaderLeaseStore) -> LeaderAuthorityRecord:
    record = await leader.load_record()
    assert record is not None
    return record


def test_la1_racing_appends_leave_one_immutable_record() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        head = await leader.load_published_head()
        assert head is not None
        racers = [authority(store, 10 + n) for n in range(5)]
        candidates = [fault_record(head.record, 10 + n) for n in range(5)]
        outcomes = await asyncio.gather(
            *(racer.append(head, c) for racer, c in zip(racers, candidates, strict=True))
        )
        created = [n for n, o in enumerate(outcomes) if isinstance(o, AppendCreated)]
        assert len(created) == 1  # one record per sequence
        winner = candidates[created[0]]
        assert all(
            isinstance(o, AppendContended) and o.winner == winner
            for n, o in enumerate(outcomes)
            if n != created[0]
        )
        first_bytes = (await store.get(record_path(2))).body
        for _ in range(3):
            acquired(await renew(leader, lease.token))
        assert (await store.get(record_path(2))).body == first_bytes  # never changed
        assert await log.read_record(store, 2) == winner
        # A body naming another sequence than its key is never read as that record.
        await store.put(record_path(9), encode_record(record_at(4)), CREATE)
        with pytest.raises(CorruptRecord, match="must equal the path seq"):
            await log.read_record(store, 9)

    asyncio.run(main())


def test_la2_the_published_sequence_never_regresses() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = authority(store, 1, wall_start_ms=FAR_FUTURE_MS)
        lease = acquired(await begin(leader))
        stale = await log.read_pointer(store)
        assert stale is not None and stale.sequence == 1
        seen = []
        for _ in range(6):
            acquired(await renew(leader, lease.token))
            seen.append(await pointer_seq(store))
        assert seen == [2, 3, 4, 5, 6, 7]  # exactly +1 each time
        # A stale publication over the first pointer never moves it back.
        assert await log.publish_pointer(store, leader.clock, 2, stale) == 7
        assert await pointer_seq(store) == 7
        # The prune keeps the head and head - 1 however old everything looks.
        await prune_history(leader, 0, deadline=far_deadline(leader.clock))
        assert await record_seqs(store) == [6, 7]
        assert (await published(leader)).lease.seq == 7
        # A pointer moved back behind a writer's back is corruption, never a restart.
        current = await log.read_pointer(store)
        await set_pointer(store, 5)
        with pytest.raises(CorruptRecord, match="regressed"):
            await log.publish_pointer(store, leader.clock, 8, current)

    asyncio.run(main())


def test_la3_a_created_record_is_found_and_repaired() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        # A writer created record 2 and crashed before publishing it.
        await put_record(store, fault_record(await published(leader), 7))
        assert await pointer_seq(store) == 1
        repaired = await published(leader)
        assert repaired.lease.seq == 2 and repaired.recovery_fault_revision == 2  # not lost
        assert await pointer_seq(store) == 2
        renewed = acquired(await renew(leader, lease.token))
        assert renewed.seq == 3  # appends go to published head + 1
        # Two records past the pointer: a writer skipped a publication; refused, not guessed.
        third = await published(leader)
        fourth = fault_record(third, 8)
        await put_record(store, fourth)
        await put_record(store, fault_record(fourth, 9))
        with pytest.raises(CorruptRecord, match="lags by more than one"):
            await leader.load_record()

    asyncio.run(main())


def test_la4_one_token_per_owner_term() -> None:
    async def main() -> None:
        store = open_store("memory://")
        incumbent, rival = authority(store, 1), authority(store, 2)
        first = acquired(await begin(incumbent))
        acquired(await renew(incumbent, first.token))
        await record_recovery_fault(
            incumbent, publisher(5), 1, deadline=far_deadline(incumbent.clock)
        )
        rotated = acquired(await begin(incumbent))  # the same owner's new term
        observation = rival.observe_rival(B, rotated)
        sim(rival).advance(TTL_S + 0.01)
        taken = acquired(await takeover(rival, observation))
        assert (first.token, rotated.token, taken.token) == (1, 2, 3)
        records = [await log.read_record(store, seq) for seq in range(1, taken.seq + 1)]
        owners: dict[int, tuple[object, ...]] = {}
        previous = None
        for record in records:
            assert record is not None
            lease = record.lease
            term = (lease.owner.node, lease.owner.boot, lease.owner.process_term)
            assert owners.setdefault(lease.token, term) == term  # one owner term per token
            if previous is not None:
                assert lease.token >= previous.token  # tokens never go back
                if lease.renewal_sequence == previous.renewal_sequence:
                    assert lease.token == previous.token  # a decision never advances it
            previous = lease

    asyncio.run(main())


@pytest.mark.parametrize("renewal_first", [True, False])
def test_la6_a_renewal_never_survives_a_racing_takeover(renewal_first: bool) -> None:
    async def main() -> None:
        store = open_store("memory://")
        incumbent, rival = authority(store, 1), authority(store, 2)
        lease = acquired(await begin(incumbent))
        observation = rival.observe_rival(B, lease)
        sim(rival).advance(TTL_S + 0.01)
        renewing = settle(renew(incumbent, lease.token))
        taking = settle(takeover(rival, observation))
        if renewal_first:
            renewal, take = await asyncio.gather(renewing, taking)
        else:
            take, renewal = await asyncio.gather(taking, renewing)
        head = await published(incumbent)
        if isinstance(take, Acquired):
            assert isinstance(renewal, Fenced), renewal  # never a silent success
            assert head.lease.owner == B
            with pytest.raises(Fenced):  # and fenced for good
                await renew(incumbent, lease.token)
        else:
            assert isinstance(renewal, Acquired) and isinstance(take, Held)
            assert head.lease.owner == A and head.lease.token == lease.token

    asyncio.run(main())


def test_la7_wall_clocks_never_authorise_a_takeover() -> None:
    async def main() -> None:
        store = open_store("memory://")
        incumbent = authority(store, 1, wall_start_ms=1)  # its expiries lie in 1970
        rival = authority(store, 2, wall_start_ms=FAR_FUTURE_MS)
        lease = acquired(await begin(incumbent))
        assert lease.expires_at_ms < FAR_FUTURE_MS
        assert held(await begin(rival, B)) == lease  # "expired" decades ago by its clock
        observation = rival.observe_rival(B, lease)
        assert held(await takeover(rival, observation)) == lease  # no monotonic ttl yet
        sim(rival).advance(TTL_S / 2)
        renewed = acquired(await renew(incumbent, lease.token))  # a renewal dated 1970 ...
        sim(rival).advance(TTL_S)
        assert held(await takeover(rival, observation)) == renewed  # ... still invalidates it
        assert (await published(incumbent)).lease.owner == A

    asyncio.run(main())


def test_la8_the_old_leader_stops_before_the_rival_starts() -> None:
    async def main() -> None:
        clock = SimClock()
        inner = ObstoreStore.memory()
        auth_a, store_a = real_authority(inner, clock)
        auth_b, store_b = real_authority(inner, clock)
        stores = (store_a, store_b)
        async with running(clock, auth_a, store_a, manager_owner=process_owner(1)) as run_a:
            await run_a.drive(0)
            first = run_a.lease()
            assert first is not None
            async with running(clock, auth_b, store_b, manager_owner=process_owner(2)) as run_b:

                def never_two_live_grants() -> None:
                    assert not (
                        run_a.manager.deadline.is_live() and run_b.manager.deadline.is_live()
                    ), f"two live grants at {clock.monotonic()}"

                await drive(clock, 2 * RENEW, stores=stores, check=never_two_live_grants)
                assert run_b.lease() is None  # the incumbent renews: the rival is held
                # The incumbent's next renewal lands, but its answer never comes back in time.
                _, release = store_a.hold_next_put_response("control/leader-lease/v")
                await drive(clock, 4 * TTL, stores=stores, check=never_two_live_grants)
                taken = run_b.lease()
                assert taken is not None and taken.owner == process_owner(2)
                assert taken.token > first.token
                assert run_a.manager.deadline.terminal  # fenced at its own deadline
                release.set()

    asyncio.run(main())


def test_la9_a_lost_grant_never_returns_with_its_token() -> None:
    async def main() -> None:
        clock = SimClock()
        auth, tracked = real_authority(ObstoreStore.memory(), clock)
        me = process_owner(1)
        async with running(clock, auth, tracked, manager_owner=me) as run:
            await run.drive(0)
            first = run.lease()
            assert first is not None
            old_proof = first.proof()
            run.candidacy.set(False)
            run.candidacy.set(True)  # a flap the manager sees only through the generation
            await run.drive(RENEW)
            again = run.lease()
            assert again is not None and again.token > first.token
            live = run.manager.deadline.is_live()
            assert not lease_grants_proof(again, me, live, old_proof)
        with pytest.raises(Fenced):  # the old token is dead in the log as well
            await auth.renew_exact(me, first.token, deadline=clock.monotonic() + TTL)

    asyncio.run(main())


def test_la10_a_new_process_term_of_the_same_node_is_a_rival() -> None:
    async def main() -> None:
        store = open_store("memory://")
        old_term, new_term = owner(7, 1, 3), owner(7, 1, 4)
        incumbent, restarted = authority(store, 1), authority(store, 2)
        lease = acquired(await begin(incumbent, old_term))
        assert held(await begin(restarted, new_term)) == lease  # not the same owner
        with pytest.raises(Fenced):
            await renew(restarted, lease.token, new_term)  # nor may it renew the old term
        observation = restarted.observe_rival(new_term, lease)
        sim(restarted).advance(TTL_S + 0.01)
        taken = acquired(await takeover(restarted, observation, new_term))
        assert taken.token == 2 and taken.owner == new_term

    asyncio.run(main())


def test_la11_corrupt_state_is_never_acted_upon() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        acquired(await renew(leader, lease.token))
        good = (await store.get(record_path(2))).body
        hand_edited = good.replace(b'"expires_at_ms":', b'"expires_at_ms": ')  # not canonical
        await store.put(record_path(2), hand_edited, OVERWRITE)
        fresh = authority(store, 3)
        for act in (
            fresh.load_record(),
            begin(fresh),
            renew(fresh, lease.token),
            record_recovery_fault(fresh, publisher(5), 1, deadline=far_deadline(fresh.clock)),
        ):
            with pytest.raises(CorruptRecord, match=record_path(2)):
                await act
        assert await record_seqs(store) == [1, 2]  # nothing acted on it ...
        assert (await store.get(record_path(2))).body == hand_edited  # ... or repaired it
        assert await pointer_seq(store) == 2

    asyncio.run(main())


class IgnoresIfMatch(PausingStore):
    """A store whose update-if-match overwrites whatever is there (no CAS)."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await super().put(key, body, OVERWRITE if isinstance(mode, IfMatch) else mode)


def test_la12_the_authority_refuses_a_store_without_cas() -> None:
    async def main() -> None:
        leader = authority(IgnoresIfMatch(open_store("memory://")), 1)
        with pytest.raises(StoreContractViolated, match="stale"):
            await leader.verify_store_contract(5.0)
        store = open_store("memory://")
        acquired(await begin(authority(store, 2)))
        pointer = await log.read_pointer(store)
        assert pointer is not None
        bare = VersionedPointer(pointer=pointer.pointer, e_tag=None, version=None)
        with pytest.raises(CorruptRecord, match="native conditional update version"):
            await log.publish_pointer(store, SimClock(), 2, bare)
        assert await pointer_seq(store) == 1  # refused before any write

    asyncio.run(main())
