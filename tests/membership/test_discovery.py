"""Discovery: a bounded listing at the first poll, then conditional reads, dead after a
full ttl unchanged on the observer's monotonic clock, the same view everywhere, self included
(docs/protocols/membership.md ML-4, ML-8..ML-10; ML §4.3.4)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.membership import (
    Discovery,
    NodeState,
    ObservedState,
    ProcessLeaseHolder,
    activate,
    node_lease_path,
)
from laminar_cluster.store import OVERWRITE, GetResult, ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.forwarding import ForwardingStore

TTL_S = 2.0
FAR = 1e9


async def _start(store: ObjectStore, clock: SimulatedClock, node: int) -> ProcessLeaseHolder:
    holder = ProcessLeaseHolder(store, clock, node, ttl_s=TTL_S)
    await holder.acquire(deadline=FAR)
    await activate(holder, deadline=FAR)
    return holder


def test_ml9_every_observer_sees_the_same_view_including_itself(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        for node in (3, 1, 2):
            await _start(make_store(), clock, node)
        views = [await Discovery(make_store(), clock).poll(deadline=FAR) for _ in range(3)]
        assert {view.signature() for view in views} == {
            ((1, "active", 1), (2, "active", 1), (3, "active", 1))
        }
        assert views[0].live_nodes() == (1, 2, 3) == views[0].assignable_nodes()

    asyncio.run(main())


def test_ml4_dead_only_after_a_full_ttl_unchanged(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        alive = await _start(make_store(), clock, 1)
        await _start(make_store(), clock, 2)  # never renews again: "killed"
        discovery = Discovery(make_store(), clock)
        states: list[tuple[str, str]] = []
        for _ in range(5):  # polls at 0, 0.5, 1.0, 1.5, 2.0 s
            view = await discovery.poll(deadline=FAR)
            one, two = view.members
            states.append((one.state.value, two.state.value))
            clock.advance(0.5)
            await alive.renew(deadline=FAR)
        assert states == [
            ("active", "active"),
            ("active", "active"),
            ("active", "suspected"),
            ("active", "suspected"),
            ("active", "dead"),
        ]
        assert view.live_nodes() == (1,)
        # A restart is a new identity: live again, with the next term.
        await _start(make_store(), clock, 2)
        restarted = (await discovery.poll(deadline=FAR)).member(2)
        assert restarted is not None and restarted.state is ObservedState.ACTIVE
        assert restarted.term == 2

    asyncio.run(main())


def test_draining_and_left_are_reported_as_announced() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=3)
        store = open_store("memory://")
        holder = await _start(store, clock, 5)
        discovery = Discovery(store, clock)
        await holder.renew(deadline=FAR, state=NodeState.DRAINING)
        view = await discovery.poll(deadline=FAR)
        assert view.signature() == ((5, "draining", 1),)
        assert view.live_nodes() == (5,) and view.assignable_nodes() == ()
        await holder.renew(deadline=FAR, state=NodeState.LEFT)
        clock.advance(10 * TTL_S)
        assert (await discovery.poll(deadline=FAR)).signature() == ((5, "left", 1),)

    asyncio.run(main())


class _Bodies(ForwardingStore):
    """Counts the reads that returned a body (a conditional GET of an unchanged object
    returns none)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.bodies = 0

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        result = await super().get(key, end=end)
        self.bodies += 1
        return result

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        result = await super().get_if_changed(key, e_tag)
        self.bodies += result is not None
        return result


def test_ml8_one_bounded_listing_then_bodies_only_of_changed_records() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=4)
        inner = open_store("memory://")
        holders = [await _start(inner, clock, node) for node in (1, 2, 3)]
        bodies = _Bodies(inner)
        store = CountingStore(bodies)
        discovery = Discovery(store, clock)
        await discovery.poll(deadline=FAR)
        assert (store.requests["list"], store.requests["get"], bodies.bodies) == (1, 3, 3)
        store.reset()
        bodies.bodies = 0
        await holders[0].renew(deadline=FAR)
        await discovery.poll(deadline=FAR)
        # No listing: the roster (read whole the first time), then one conditional GET per
        # record, of which only the renewed one returns a body.
        assert (store.requests["list"], store.requests["get"], bodies.bodies) == (0, 4, 2)
        store.reset()
        bodies.bodies = 0
        await discovery.poll(deadline=FAR)
        assert (store.requests["list"], store.requests["get"], bodies.bodies) == (0, 4, 0)
        with pytest.raises(CorruptRecord, match="more than 2 node lease objects"):
            await Discovery(store, clock, nodes_max=2).poll(deadline=FAR)
        bounded = Discovery(store, clock, nodes_max=2, list_every=2)
        with pytest.raises(CorruptRecord, match="more than 2 node lease objects"):
            await bounded.poll(deadline=FAR)
        # At a roster poll, a roster over the bound is reported and the listing refuses too.
        with pytest.raises(CorruptRecord, match="more than 2 node lease objects"):
            await bounded.poll(deadline=FAR)

    asyncio.run(main())


def test_ml10_corrupt_or_foreign_records_are_reported_not_trusted() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=5)
        store = open_store("memory://")
        await _start(store, clock, 1)
        await store.put(node_lease_path(2), b"not json", OVERWRITE)
        await store.put("membership/nodes/node=2/lease.json", b"{}", OVERWRITE)
        view = await Discovery(store, clock).poll(deadline=FAR)
        assert view.signature() == ((1, "active", 1),)
        assert len(view.problems) == 2
        assert any("not a canonical node lease path" in p for p in view.problems)

    asyncio.run(main())
