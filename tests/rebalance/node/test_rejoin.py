"""A fenced node process rejoins by itself (rebalance/node/rejoin.py, RebalanceNode.run; issue 15
"A node cut off from the store rejoins by itself"): after an outage longer than its ttl the
process starts a new incarnation (a new boot and term) once the store answers, logging each
attempt, not ready meanwhile; `exit_on_fence` exits 3 instead; a newer process holding the node
id is never taken over; a leave asked for while rejoining stops the process.

In-process nodes on the simulation's store behind a `FaultyStore` whose outage windows are in
simulated time (the helpers of test_startup.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from typing import Any

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.lease.records import ProcessLease
from laminar_cluster.membership import NodeState, ProcessLeaseHolder, read_node_record
from laminar_cluster.membership.records import NodeLeaseRecord
from laminar_cluster.metrics.health import node_readiness
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import (
    EXIT_FENCED,
    EXIT_STOPPED,
    NodeConfig,
    RebalanceNode,
)
from laminar_cluster.rebalance.node.rejoin import RejoinVerdict, rejoin_verdict
from laminar_cluster.store.faulty import FaultyStore
from tests.rebalance.node.test_startup import TICK_S, TTL_S, _drive, _events, _faulty

OUTAGE_AT_S = 3.0
OUTAGE_S = 3 * TTL_S  # longer than the ttl: the lease lapses and peers would count it dead


def _node(store: FaultyStore, clock: SimulatedClock, **config: Any) -> tuple[RebalanceNode, Any]:
    out = io.StringIO()
    settings = NodeConfig(node_id=1, ttl_s=TTL_S, poll_s=0.2, debounce_s=0.5, retry_delay_s=0.5)
    node = RebalanceNode(
        store, clock, dataclasses.replace(settings, **config), NodeLog(out, clock, 1)
    )
    return node, out


async def _until(clock: SimulatedClock, check: Any, running: asyncio.Task[int]) -> None:
    while not check():
        assert not running.done(), "the node stopped early"
        await clock.sleep(TICK_S)


def _record(lease_term: int, owner: str, state: NodeState) -> NodeLeaseRecord:
    return NodeLeaseRecord(
        version=2,
        lease=ProcessLease(node=1, owner=owner, term=lease_term, seq=4, expires_at_ms=0),
        state=state,
        ttl_ms=2000,
        nonce="00000000-0000-4000-8000-000000000001",
        failure_domain=None,
        takeovers=(),
        report=None,
    )


def test_ml13_rejoin_verdict_rejoins_over_its_own_or_a_left_record_only() -> None:
    mine, other = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    assert rejoin_verdict(None, {mine}) is RejoinVerdict.REJOIN
    assert rejoin_verdict(_record(3, mine, NodeState.ACTIVE), {mine}) is RejoinVerdict.REJOIN
    assert rejoin_verdict(_record(4, other, NodeState.LEFT), {mine}) is RejoinVerdict.REJOIN
    for state in (NodeState.JOINING, NodeState.ACTIVE, NodeState.DRAINING):
        assert rejoin_verdict(_record(4, other, state), {mine}) is RejoinVerdict.DUPLICATE


def test_ml13_a_node_cut_off_past_its_ttl_rejoins_with_a_new_term() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=21)
        store = _faulty(clock, (OUTAGE_AT_S, OUTAGE_AT_S + OUTAGE_S))
        outage_ends_s = clock.monotonic() + OUTAGE_AT_S + OUTAGE_S
        node, out = _node(store, clock)
        seen: list[str | None] = []

        async def scenario() -> int:
            async with asyncio.TaskGroup() as group:
                running = group.create_task(node.run())
                await _until(clock, lambda: node.rejoining is not None, running)
                seen.append(node_readiness(node))
                await _until(clock, lambda: _named(out, "rejoined"), running)
                await _until(
                    clock, lambda: node.holder is not None and node.holder.is_live(), running
                )
                node.stop()
            return running.result()

        assert await _drive(clock, scenario()) == EXIT_STOPPED
        events = _events(out)
        names = [event["event"] for event in events]
        fenced = [e for e in events if e["event"] == "fenced"]
        assert len(fenced) == 1 and fenced[0]["rejoin"] is True, fenced
        waits = [e for e in events if e["event"] == "rejoining"]
        assert waits and all(w["reason"] and w["next_attempt_t_mono"] > w["t_mono"] for w in waits)
        assert [e["attempt"] for e in waits] == list(range(1, len(waits) + 1))
        acquired = [e for e in events if e["event"] == "acquired"]
        assert [e["term"] for e in acquired] == [1, 2]  # a new incarnation: the next term
        assert acquired[1]["boot"] != acquired[0]["boot"]
        rejoined = next(e for e in events if e["event"] == "rejoined")
        assert rejoined["term"] == 2 and rejoined["t_mono"] >= outage_ends_s
        assert names.index("fenced") < names.index("rejoining") < names.index("rejoined")
        assert seen[0] is not None and seen[0].startswith("rejoining after a fence")
        stored = await read_node_record(store.inner, 1)
        assert stored is not None and stored.record.lease.term == 2

    asyncio.run(main())


def test_ml13_exit_on_fence_exits_3_without_rejoining() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=22)
        store = _faulty(clock, (OUTAGE_AT_S, OUTAGE_AT_S + OUTAGE_S))
        node, out = _node(store, clock, exit_on_fence=True)
        assert await _drive(clock, node.run()) == EXIT_FENCED
        names = [event["event"] for event in _events(out)]
        assert "fenced" in names and "rejoining" not in names and "rejoined" not in names
        assert names[-1] == "stopped"

    asyncio.run(main())


def test_ml13_a_newer_process_holding_the_node_id_is_never_taken_over() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=23)
        store = _faulty(clock)
        node, out = _node(store, clock)

        async def scenario() -> tuple[int, str]:
            async with asyncio.TaskGroup() as group:
                running = group.create_task(node.run())
                await _until(clock, lambda: _named(out, "active"), running)
                duplicate = ProcessLeaseHolder(store.inner, clock, 1, ttl_s=TTL_S)
                acquired = await duplicate.acquire(deadline=clock.monotonic() + 5)
            return running.result(), acquired.record.lease.owner

        code, duplicate_boot = await _drive(clock, scenario())
        assert code == EXIT_FENCED
        events = _events(out)
        fenced = [e for e in events if e["event"] == "fenced"]
        assert len(fenced) == 2 and "holds the node id" in fenced[1]["error"]
        assert [e["event"] for e in events].count("acquired") == 1
        stored = await read_node_record(store.inner, 1)
        assert stored is not None and stored.record.lease.owner == duplicate_boot

    asyncio.run(main())


def test_ml13_a_leave_asked_for_while_rejoining_stops_the_process() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=24)
        store = _faulty(clock, (OUTAGE_AT_S, OUTAGE_AT_S + 60.0))
        node, out = _node(store, clock)

        async def scenario() -> int:
            async with asyncio.TaskGroup() as group:
                running = group.create_task(node.run())
                await _until(clock, lambda: _named(out, "rejoining"), running)
                node.request_leave()
            return running.result()

        assert await _drive(clock, scenario()) == EXIT_FENCED
        names = [event["event"] for event in _events(out)]
        assert "rejoined" not in names and names.count("acquired") == 1
        assert names[-1] == "stopped"

    asyncio.run(main())


def _named(out: io.StringIO, name: str) -> bool:
    return any(event["event"] == name for event in _events(out))
