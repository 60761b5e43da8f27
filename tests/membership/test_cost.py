"""The membership request budget (docs/protocols/membership.md "Cost"), counted: P nodes
renewing every R and polling discovery every p for a simulated minute make exactly one PUT per
renewal; discovery makes one LIST every `list_every` polls (the first poll and the repairs,
each reading at most the P records that changed) and, at every other poll, exactly 1 + P
conditional GETs (the roster, then each record); no HEAD, no DELETE."""

from __future__ import annotations

import asyncio
import math

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.membership import ProcessLeaseHolder, activate
from laminar_cluster.membership.discovery import ROSTER_LIST_EVERY_DEFAULT, Discovery
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
# S3 Standard list prices, per request, and a 30-day month.
PUT_OR_LIST_USD = 0.005 / 1000
GET_USD = 0.0004 / 1000
MONTH_S = 30 * 86_400


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
        lists = math.ceil(polls_per_node / ROSTER_LIST_EVERY_DEFAULT)
        roster_polls = polls_per_node - lists
        for counter in polls:
            assert counter.requests["list"] == lists == 2  # polls 0 and 15, not 30
            # Roster polls: exactly 1 + P GETs. The first listing reads all P records, a
            # repair listing the ones that changed since the poll before (P at most).
            gets = counter.requests["get"]
            assert roster_polls * (1 + P) + P <= gets <= roster_polls * (1 + P) + lists * P
            assert set(counter.requests) == {"list", "get"}
            # The discovery bill: LIST 1 / (15 p) + GET (1 + P) / p, $2.50 a month at the
            # defaults (a LIST every poll alone was $6.48).
            month_usd = (lists * PUT_OR_LIST_USD + gets * GET_USD) * MONTH_S / RUN_S
            assert (
                month_usd <= 12.96 / (ROSTER_LIST_EVERY_DEFAULT * POLL_S) + 1.04 * (1 + P) / POLL_S
            )

    asyncio.run(main())
