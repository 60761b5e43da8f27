"""The roster and discovery without a listing per poll (docs/protocols/membership.md ML-8,
ML-10, ML-14; issue 15): the roster names every node that activated, racing joiners all end up
in it, and discovery lists only at its first poll, every `list_every`-th poll, and while the
roster is missing or corrupt, with the same view, ages included, as a listing every poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import CorruptRecord, InvalidArgument, WriteOutcomeUnknown
from laminar_cluster.membership import (
    Discovery,
    MembershipView,
    NodeState,
    ProcessLeaseHolder,
    activate,
)
from laminar_cluster.membership.paths import ROSTER_PATH
from laminar_cluster.membership.records import MembershipRoster, decode_roster, encode_roster
from laminar_cluster.membership.roster import RosterJoin, join_roster, read_roster
from laminar_cluster.store import OVERWRITE, GetResult, ObjectStore, open_store
from laminar_cluster.store.api import PutMode, PutResult
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.forwarding import ForwardingStore

TTL_S = 2.0
FAR = 1e9
LIST_EVERY = 5


async def _start(store: ObjectStore, clock: SimulatedClock, node: int) -> ProcessLeaseHolder:
    holder = ProcessLeaseHolder(store, clock, node, ttl_s=TTL_S)
    await holder.acquire(deadline=FAR)
    await activate(holder, deadline=FAR)
    return holder


async def _start_unlisted(
    store: ObjectStore, clock: SimulatedClock, node: int
) -> ProcessLeaseHolder:
    """A node that never joined the roster (an older binary, or one that died before it)."""
    holder = ProcessLeaseHolder(store, clock, node, ttl_s=TTL_S)
    await holder.acquire(deadline=FAR)
    await holder.renew(deadline=FAR, state=NodeState.ACTIVE)
    return holder


async def _roster_nodes(store: ObjectStore) -> tuple[int, ...]:
    stored = await read_roster(store)
    assert stored is not None
    return stored.roster.nodes


async def _poll(discovery: Discovery, counted: CountingStore) -> tuple[MembershipView, int, int]:
    """One poll: its view, and the LISTs and GETs it made."""
    counted.reset()
    view = await discovery.poll(deadline=FAR)
    return view, counted.requests["list"], counted.requests["get"]


def test_ml8_one_listing_every_list_every_polls_and_one_conditional_get_per_node(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=11)
        holders = [await _start(make_store(), clock, node) for node in (1, 2, 3)]
        counted = CountingStore(make_store())
        discovery = Discovery(counted, clock, list_every=LIST_EVERY)
        seen: list[tuple[int, int]] = []
        for index in range(3 * LIST_EVERY):
            clock.advance(0.1)
            await holders[index % 3].renew(deadline=FAR)  # one record changes per poll
            view, lists, gets = await _poll(discovery, counted)
            assert view.signature() == ((1, "active", 1), (2, "active", 1), (3, "active", 1))
            seen.append((lists, gets))
        first, *rest = seen
        assert first == (1, 3)  # the first poll lists and reads every record
        for index, figures in enumerate(rest, start=1):
            if index % LIST_EVERY == 0:
                assert figures == (1, 1), index  # the repair listing: the changed record only
            else:
                assert figures == (0, 1 + 3), index  # the roster, then each record conditionally
        assert sum(lists for lists, _ in seen) == 3  # exactly one LIST every LIST_EVERY polls

    asyncio.run(main())


def test_ml14_a_join_is_seen_at_the_next_poll_without_a_listing(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=12)
        await _start(make_store(), clock, 1)
        counted = CountingStore(make_store())
        discovery = Discovery(counted, clock, list_every=LIST_EVERY)
        view, lists, _ = await _poll(discovery, counted)
        assert view.signature() == ((1, "active", 1),) and lists == 1
        await _start(make_store(), clock, 7)
        assert await _roster_nodes(make_store()) == (1, 7)
        view, lists, gets = await _poll(discovery, counted)
        assert view.signature() == ((1, "active", 1), (7, "active", 1))
        assert (lists, gets) == (0, 1 + 2)

    asyncio.run(main())


def test_ml8_a_node_missing_from_the_roster_is_found_by_the_repair_listing(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=13)
        await _start(make_store(), clock, 1)
        counted = CountingStore(make_store())
        discovery = Discovery(counted, clock, list_every=LIST_EVERY)
        await _poll(discovery, counted)
        late = await _start_unlisted(make_store(), clock, 4)
        assert await _roster_nodes(make_store()) == (1,)
        signatures = []
        for _ in range(LIST_EVERY + 2):
            await late.renew(deadline=FAR)
            view, _, _ = await _poll(discovery, counted)
            signatures.append(view.signature())
        unseen, seen = ((1, "active", 1),), ((1, "active", 1), (4, "active", 1))
        # Polls 1..4 read the roster; poll 5 lists and finds node 4, which stays known.
        assert signatures == [unseen] * (LIST_EVERY - 1) + [seen] * 3

    asyncio.run(main())


def test_ml8_a_store_without_a_roster_is_listed_every_poll(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=14)
        for node in (2, 5):
            await _start_unlisted(make_store(), clock, node)
        counted = CountingStore(make_store())
        discovery = Discovery(counted, clock, list_every=LIST_EVERY)
        for index in range(LIST_EVERY + 1):
            view, lists, gets = await _poll(discovery, counted)
            assert view.signature() == ((2, "active", 1), (5, "active", 1))
            assert view.problems == ()
            # The roster's GET (not found) except at listing polls, then the listing.
            assert (lists, gets) == ((1, 2) if index == 0 else (1, 0 if index == 5 else 1))

    asyncio.run(main())


def test_ml10_a_corrupt_roster_is_reported_listed_around_and_never_overwritten(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=15)
        await _start(make_store(), clock, 1)
        bad = b'{"version":1,"nodes":[3,2]}'
        await make_store().put(ROSTER_PATH, bad, OVERWRITE)
        holder = ProcessLeaseHolder(make_store(), clock, 2, ttl_s=TTL_S)
        await holder.acquire(deadline=FAR)
        assert await holder.join_roster(deadline=FAR) is RosterJoin.CORRUPT
        await activate(holder, deadline=FAR)  # the start goes on
        assert (await make_store().get(ROSTER_PATH)).body == bad  # never overwritten
        counted = CountingStore(make_store())
        discovery = Discovery(counted, clock, list_every=LIST_EVERY)
        for index in range(3):
            view, lists, _ = await _poll(discovery, counted)
            assert view.signature() == ((1, "active", 1), (2, "active", 1))
            assert lists == 1
            if index:  # the first poll lists without reading the roster
                assert [p for p in view.problems if ROSTER_PATH in p], view.problems
                assert all("not strictly ascending" in p for p in view.problems)

    asyncio.run(main())


class _ReadTogether(ForwardingStore):
    """Holds each roster read until `readers` reads are in, so every joiner reads the same
    version before any writes: a forced race."""

    def __init__(self, inner: ObjectStore, barrier: asyncio.Barrier) -> None:
        super().__init__(inner)
        self.barrier = barrier
        self.held = True

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        try:
            return await super().get(key, end=end)
        finally:  # found or not found (there is no roster before the first write)
            if key == ROSTER_PATH and self.held:
                self.held = False
                await self.barrier.wait()


def test_ml14_racing_joiners_all_end_up_in_the_roster(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=16)
        nodes = (9, 3, 6, 1)
        barrier = asyncio.Barrier(len(nodes))
        stores = [_ReadTogether(make_store(), barrier) for _ in nodes]
        async with asyncio.TaskGroup() as group:
            joins = [
                group.create_task(join_roster(store, clock, node, deadline=FAR))
                for store, node in zip(stores, nodes, strict=True)
            ]
            while not all(join.done() for join in joins):
                await clock.step(0.01)
        assert [join.result() for join in joins] == [RosterJoin.ADDED] * len(nodes)
        assert await _roster_nodes(make_store()) == (1, 3, 6, 9)
        # A second join of a listed node only reads.
        counted = CountingStore(make_store())
        assert await join_roster(counted, clock, 6, deadline=FAR) is RosterJoin.ALREADY_LISTED
        assert dict(counted.requests) == {"get": 1}

    asyncio.run(main())


def test_ml8_the_roster_view_equals_the_listing_view_ages_included(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=17)
        alive = await _start(make_store(), clock, 1)
        await _start(make_store(), clock, 2)  # never renews again: "killed"
        by_roster = Discovery(make_store(), clock, list_every=LIST_EVERY)
        by_listing = Discovery(make_store(), clock, list_every=1)
        states = []
        for _ in range(6):  # polls at 0, 0.5, ... 2.5 s
            roster_view = await by_roster.poll(deadline=FAR)
            listing_view = await by_listing.poll(deadline=FAR)
            assert roster_view.members == listing_view.members  # ages (ML-4) included
            states.append(tuple(member.state.value for member in roster_view.members))
            clock.advance(0.5)
            await alive.renew(deadline=FAR)
        assert states == [
            ("active", "active"),
            ("active", "active"),
            ("active", "suspected"),
            ("active", "suspected"),
            ("active", "dead"),
            ("active", "dead"),
        ]

    asyncio.run(main())


def test_ml14_a_malformed_roster_is_refused_on_read_and_never_written() -> None:
    for nodes in ((2, 1), (1, 1), (0, 4)):
        roster = MembershipRoster(version=1, nodes=nodes)
        with pytest.raises(CorruptRecord):
            decode_roster(
                b'{"version":1,"nodes":[' + ",".join(map(str, nodes)).encode() + b"]}",
                key=ROSTER_PATH,
            )
        with pytest.raises(InvalidArgument, match="roster"):
            encode_roster(roster, key=ROSTER_PATH)
    with pytest.raises(CorruptRecord, match="at most 2"):
        decode_roster(b'{"version":1,"nodes":[1,2,3]}', key=ROSTER_PATH, nodes_max=2)
    assert decode_roster(b'{"version":1,"nodes":[1,5]}', key=ROSTER_PATH).nodes == (1, 5)


class _LostAnswer(ForwardingStore):
    """Applies each write, then loses its answer."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        await super().put(key, body, mode)
        raise WriteOutcomeUnknown(f"{key}: answer lost", key=key)


def test_ml14_a_roster_write_applied_unseen_is_settled_by_the_next_read() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=18)
        store = open_store("memory://")
        await join_roster(store, clock, 1, deadline=FAR)

        counted = CountingStore(_LostAnswer(store))
        async with asyncio.TaskGroup() as group:
            join = group.create_task(join_roster(counted, clock, 2, deadline=FAR))
            while not join.done():
                await clock.step(0.01)
        assert join.result() is RosterJoin.ADDED
        assert dict(counted.requests) == {"get": 2, "put": 1}
        assert await _roster_nodes(store) == (1, 2)

    asyncio.run(main())
