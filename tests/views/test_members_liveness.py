"""A member's state as the views show it (views/members.py; issue 17 "a SIGKILLed node is shown
as dead, not left"): a graceful leave is `left`; a process that stopped renewing is `dead` by its
record's age, and stays `dead` after a leader's takeover fenced it (the takeover writes `left`
for the fence, but the node never left)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.membership import ProcessLeaseHolder, activate
from laminar_cluster.membership.discovery import Discovery
from laminar_cluster.membership.paths import node_lease_path
from laminar_cluster.membership.records import NodeState
from laminar_cluster.rebalance.cluster.process_takeover import ObservedLeases, fence_process
from laminar_cluster.store import open_store
from laminar_cluster.views.members import liveness, taken_over, view_members

TTL_S = 5.0
FAR = 1e9


def _states(url: str, now_ms: int) -> dict[int, tuple[str, str | None]]:
    async def main() -> dict[int, tuple[str, str | None]]:
        store = open_store(url)
        try:
            view = await view_members(store, now_ms)
        finally:
            await store.close()
        assert view.problems == []
        return {row["node"]: (row["state"], row["why"]) for row in view.members}

    return asyncio.run(main())


def test_left_dead_and_taken_over(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}?fsync=false"

    async def build() -> None:
        clock = SimulatedClock(seed=3)
        store = open_store(url)
        holders = {}
        for node in (1, 2, 3):
            holders[node] = ProcessLeaseHolder(store, clock, node, ttl_s=TTL_S)
            await holders[node].acquire(deadline=FAR)
            await activate(holders[node], deadline=FAR)
        await holders[1].renew(deadline=FAR, state=NodeState.LEFT)  # a graceful leave
        discovery = Discovery(store, clock)
        await discovery.poll(deadline=FAR)
        clock.advance(TTL_S + 1)  # node 3 (and 2) renew no more: dead to this observer
        view = await discovery.poll(deadline=FAR)
        killed = holders[3].record.lease
        participant = FenceParticipant(node_id=3, boot_incarnation=killed.owner)
        await fence_process(store, clock, participant, view, ObservedLeases(), deadline=FAR)
        await store.close()

    asyncio.run(build())
    store_root = tmp_path / "store"
    now_ms = _now_ms(store_root)
    states = _states(url, now_ms)
    assert states[1] == ("left", None)
    assert states[2] == ("active", None)  # renewed just now by the store's clock
    assert states[3][0] == "dead"  # fenced by the takeover, never left
    assert states[3][1] == "stopped renewing and was fenced by the leader (never left gracefully)"

    later_ms = now_ms + int(TTL_S * 1000) + 30_000  # nobody renewed for 35 s
    states = _states(url, later_ms)
    assert states[1][0] == "left" and states[3][0] == "dead"
    assert states[2] == ("dead", "no renewal for 35 s (ttl 5 s)")
    suspected = _states(url, now_ms + int(TTL_S * 1000 * 0.75))
    assert suspected[2][0] == "suspected"


def _now_ms(root: Path) -> int:
    """The newest last-modified time of the store's objects (its clock's "now")."""
    newest = max(p.stat().st_mtime for p in root.rglob("*") if p.is_file())
    return int(newest * 1000)


def test_liveness_of_a_record_by_its_age() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        store = open_store("memory://")
        holder = ProcessLeaseHolder(store, clock, 7, ttl_s=2.0)
        record = (await holder.acquire(deadline=FAR)).record
        assert not taken_over(record)  # a new start records its takeover, but is joining
        assert liveness(record, 0) == ("joining", None)
        assert liveness(record, 1_500)[0] == "suspected"
        assert liveness(record, 2_001) == ("dead", "no renewal for 2 s (ttl 2 s)")
        left = await holder.renew(deadline=FAR, state=NodeState.LEFT)
        assert liveness(left, 60_000) == ("left", None)  # left stays left, however old
        got = await store.get(node_lease_path(7))
        assert got.body  # the record is there
        await store.close()

    asyncio.run(main())


def test_a_restarted_node_that_left_gracefully_is_left(tmp_path: Path) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        store = open_store(f"file://{tmp_path / 'store'}")
        first = ProcessLeaseHolder(store, clock, 4, ttl_s=TTL_S)
        await first.acquire(deadline=FAR)
        second = ProcessLeaseHolder(store, clock, 4, ttl_s=TTL_S)  # a restart: takes over
        await second.acquire(deadline=FAR)
        await activate(second, deadline=FAR)
        record = await second.renew(deadline=FAR, state=NodeState.LEFT)
        assert record.takeovers and not taken_over(record)
        assert liveness(record, 0) == ("left", None)
        await store.close()

    os.makedirs(tmp_path / "store", exist_ok=True)
    asyncio.run(main())
