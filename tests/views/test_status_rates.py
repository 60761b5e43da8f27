"""`status` shows the live store request rate per node and in total (views/status.py,
views/request_rates.py; issue 15): from the counters each node's lease record carries (ML-12),
over the interval between two of one incarnation's reports once the reader saw two, in the
table and in `--json`. A one-shot status reads the members twice, a renewal apart."""

from __future__ import annotations

import asyncio

from rich.console import Console

from laminar_cluster.clock import RealClock, SimulatedClock
from laminar_cluster.membership import ProcessLeaseHolder, activate
from laminar_cluster.membership.leave import keep_renewed
from laminar_cluster.membership.records import NodeReport, node_report
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.views.request_rates import OPS, SECOND_READ_S_MAX, second_read_wait_s
from laminar_cluster.views.status import StatusReader, status_once
from laminar_cluster.views.status_render import render

FAR = 1e9


class Reporting:
    """A node's process lease whose report counts its own requests, as a node's does."""

    def __init__(
        self, store: ObjectStore, clock: SimulatedClock | RealClock, node: int, ttl_s: float
    ):
        self.counter = CountingStore(store)
        self.clock, self.started_s = clock, clock.monotonic()
        self.holder = ProcessLeaseHolder(self.counter, clock, node, ttl_s=ttl_s, report=self.report)

    def report(self) -> NodeReport:
        elapsed_s = self.clock.monotonic() - self.started_s
        return node_report(self.counter.requests, elapsed_s, 1, ())


def test_a_watch_shows_each_nodes_rate_over_its_last_renewal_interval() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=5)
        store = open_store("memory://")
        nodes = [Reporting(store, clock, node, ttl_s=4.0) for node in (1, 2)]
        for node in nodes:
            await node.holder.acquire(deadline=FAR)
            await activate(node.holder, deadline=FAR)
        reader = StatusReader(store, clock)
        first = await reader.read(timeout_s=30.0)
        assert first.requests is not None
        assert [row["basis"] for row in first.requests["nodes"]] == ["since start"] * 2
        clock.advance(1.0)
        for _ in range(4):  # node 2 makes 4 more reads and a renewal in the second
            await nodes[1].counter.head(nodes[1].holder.key)
        for node in nodes:
            await node.holder.renew(deadline=FAR)
        second = await reader.read(timeout_s=30.0)
        assert second.requests is not None
        rows = {row["node"]: row for row in second.requests["nodes"]}
        assert {row["basis"] for row in rows.values()} == {"interval"}
        # Between the two reports: node 1 wrote its activation's successor (1 put); node 2 also
        # made 4 heads. Each over the 1 s between its two reports.
        assert rows[1]["span_ms"] == 1000 and rows[2]["span_ms"] == 1000
        assert rows[1]["per_s"] == {"get": 0.0, "head": 0.0, "put": 1.0, "list": 0.0, "delete": 0.0}
        assert rows[2]["per_s"]["head"] == 4.0 and rows[2]["per_s"]["put"] == 1.0
        total = second.requests["total_per_s"]
        assert total == {op: rows[1]["per_s"][op] + rows[2]["per_s"][op] for op in OPS}
        assert second.as_json()["requests"] == second.requests
        text = _text(second)
        assert "req/s" in text and "store requests" in text
        assert "6.0/s: head 4, put 2 (2 nodes, over their last renewal interval)" in text
        await store.close()

    asyncio.run(main())


def test_a_one_shot_status_reads_the_members_twice_a_renewal_apart() -> None:
    async def main() -> None:
        clock = RealClock()
        store = open_store("memory://")
        ttl_s = 0.4  # renewals every 0.1 s: the second read waits 0.125 s
        nodes = [Reporting(store, clock, node, ttl_s=ttl_s) for node in (1, 2, 3)]
        for node in nodes:
            await node.holder.acquire(deadline=clock.monotonic() + 5)
            await activate(node.holder, deadline=clock.monotonic() + 5)
        async with asyncio.TaskGroup() as group:
            renewals = [
                group.create_task(keep_renewed(node.holder, clock, interval_s=ttl_s / 4))
                for node in nodes
            ]
            view = await status_once(store, clock)
            for task in renewals:
                task.cancel()
        assert view.requests is not None
        assert [row["node"] for row in view.requests["nodes"]] == [1, 2, 3]
        assert {row["basis"] for row in view.requests["nodes"]} == {"interval"}
        assert all(row["per_s"]["put"] > 0 for row in view.requests["nodes"])  # renewals
        assert "over their last renewal interval" in _text(view)
        await store.close()

    asyncio.run(main())


def test_the_second_read_waits_a_renewal_and_is_bounded() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=6)
        store = open_store("memory://")
        quiet = ProcessLeaseHolder(store, clock, 1, ttl_s=8.0)  # reports nothing
        await quiet.acquire(deadline=FAR)
        reader = StatusReader(store, clock)
        await reader.read(timeout_s=30.0)
        assert second_read_wait_s(reader.last_members) is None
        slow = Reporting(store, clock, 2, ttl_s=200.0)
        await slow.holder.acquire(deadline=FAR)
        await reader.read(timeout_s=30.0)
        assert second_read_wait_s(reader.last_members) == SECOND_READ_S_MAX
        fast = Reporting(store, clock, 3, ttl_s=8.0)
        await fast.holder.acquire(deadline=FAR)
        await slow.holder.renew(deadline=FAR, state=None)
        await reader.read(timeout_s=30.0)
        members = [m for m in reader.last_members if m.node != 2]
        assert second_read_wait_s(members) == 8.0 / 4 * 1.25
        await store.close()

    asyncio.run(main())


def _text(view: object) -> str:
    console = Console(width=120, record=True)
    console.print(render(view))  # type: ignore[arg-type]
    return console.export_text()
