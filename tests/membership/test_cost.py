"""The membership request budget (docs/protocols/membership.md "Cost"), counted: P nodes
renewing every R and polling discovery every p for a simulated minute make exactly one PUT per
renewal, one LIST per poll, and at most one GET per peer record that changed since the last
poll, P records at most; no HEAD, no DELETE."""

from __future__ import annotations

import asyncio
import math

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.membership import ProcessLeaseHolder, activate
from laminar_cluster.membership.discovery import Discovery
from laminar_cluster.membership.leave import keep_renewed
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.counting import CountingStore
from tests.sim.store import SimStore

P = 3
TTL_S = 10.0
RENEW_S = TTL_S / 4
POLL_S = 2.0
RUN_S = 60.0
FAR = 1e9


async def _poll_every(discovery: Discovery, clock: SimulatedClock, until_s: float) -> None:
    while clock.monotonic() + POLL_S <= until_s:
        await clock.sleep(POLL_S)
        await discovery.poll(deadline=FAR)


def test_renewals_and_discovery_stay_within_the_membership_budget() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=15)
        shared: ObjectStore = SimStore.fresh(clock)
        renewals = [CountingStore(shared) for _ in range(P)]
        polls = [CountingStore(shared) for _ in range(P)]
        holders = [ProcessLeaseHolder(renewals[i], clock, i + 1, ttl_s=TTL_S) for i in range(P)]
        for holder in holders:
            await holder.acquire(deadline=FAR)
            await activate(holder, deadline=FAR)
        for counter in renewals:
            counter.reset()
        started_s = clock.monotonic()
        until_s = started_s + RUN_S
        async with asyncio.TaskGroup() as group:
            loops = [
                group.create_task(keep_renewed(holder, clock, interval_s=RENEW_S))
                for holder in holders
            ]
            for counter in polls:
                group.create_task(_poll_every(Discovery(counter, clock), clock, until_s))
            while clock.monotonic() < until_s:
                await clock.step(0.05)
            for loop in loops:
                loop.cancel()
        renews_per_node = math.floor(RUN_S / RENEW_S)
        polls_per_node = math.floor(RUN_S / POLL_S)
        for counter in renewals:  # one update-if-match per renewal, nothing else
            assert dict(counter.requests) == {"put": renews_per_node}
        for counter in polls:
            assert counter.requests["list"] == polls_per_node
            # Each poll reads only the records that changed: every peer renews at most
            # ceil(p / R) times between two polls, and there are P records.
            assert counter.requests["get"] <= polls_per_node * min(
                P, P * math.ceil(POLL_S / RENEW_S)
            )
            assert counter.requests["get"] <= P + P * renews_per_node
            assert set(counter.requests) == {"list", "get"}

    asyncio.run(main())
