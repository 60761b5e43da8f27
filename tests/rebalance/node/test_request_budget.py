"""The steady request budget of a rebalance node (RB "Cost", LA "Cost", AS "Cost"): P node
processes (`RebalanceNode`, the control engine) on the simulation's store and clock at the
default timings, after a join rotated the cluster to version 2; every node's requests counted
by purpose (`PurposeCountingStore`) over two simulated minutes.

* the watcher: about one conditional read of the head hint and one of its own adoption slot
  per tick, whatever P is (it was 18 requests a tick at P = 3, growing by one per node);
* a lease follower: the pointer and the new record once per renewal interval (it was three
  reads every quarter interval);
* the leader's rebalance loop: two conditional reads a tick while nothing changed (it was a
  full attempt, about 20 requests, every tick);
* membership discovery: the roster and each of the P records conditionally per poll, a
  listing only every 15th poll (ML-8; it was a listing every poll).
"""

from __future__ import annotations

import asyncio
import io
import math
from collections import Counter

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.membership.discovery import ROSTER_LIST_EVERY_DEFAULT
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig, RebalanceNode
from tests.sim.store import SimStore

STEP_S = 0.05
JOIN_AFTER_S = 20.0
SETTLE_S = 60.0
WINDOW_S = 120.0


async def _run_for(clock: SimulatedClock, seconds: float) -> None:
    until = clock.monotonic() + seconds
    while clock.monotonic() < until:
        await clock.step(STEP_S)


async def _measure(
    nodes: int,
) -> tuple[list[Counter[str]], list[bool], NodeConfig, list[Counter[tuple[str, str]]]]:
    clock = SimulatedClock(seed=nodes)
    store = SimStore.fresh(clock)
    config = NodeConfig(node_id=1)
    processes = [
        RebalanceNode(store, clock, NodeConfig(node_id=n), NodeLog(io.StringIO(), clock, n))
        for n in range(1, nodes + 1)
    ]
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(process.run()) for process in processes[:-1]]
        await _run_for(clock, JOIN_AFTER_S)
        tasks.append(group.create_task(processes[-1].run()))  # a join: a rotation to v2
        await _run_for(clock, SETTLE_S)
        before = [Counter(process.requests.by_purpose) for process in processes]
        kinds_before = [Counter(process.requests.by_purpose_kind) for process in processes]
        await _run_for(clock, WINDOW_S)
        used = [Counter(process.requests.by_purpose) for process in processes]
        kinds = [Counter(process.requests.by_purpose_kind) for process in processes]
        leaders = [
            process.leadership is not None and process.leadership.proof() is not None
            for process in processes
        ]
        for process in processes:
            process.stop()
        while not all(task.done() for task in tasks):
            await clock.step(STEP_S)
    for counts, start in zip(used, before, strict=True):
        counts.subtract(start)
    for by_kind, kind_start in zip(kinds, kinds_before, strict=True):
        by_kind.subtract(kind_start)
    assert all(process.engine is not None for process in processes)
    versions = {process.engine.registry().version for process in processes if process.engine}
    assert versions == {2}, versions  # the join rotated, and every node runs it
    return used, leaders, config, kinds


@pytest.mark.parametrize("nodes", [3, 6])
def test_steady_requests_per_tick_do_not_grow_with_the_nodes(nodes: int) -> None:
    used, leaders, config, kinds = asyncio.run(_measure(nodes))
    assert leaders.count(True) == 1
    ticks = WINDOW_S / config.poll_s
    renewals = WINDOW_S / config.renew_interval_s
    polls_max = math.ceil(WINDOW_S / config.poll_s) + 1  # polls falling in the window
    for counts, leader, by_kind in zip(used, leaders, kinds, strict=True):
        # Discovery: at most one listing per 15 polls; the roster and the P records, each
        # conditionally, at the other polls (a listing poll reads only changed records).
        assert by_kind["membership", "list"] <= math.ceil(polls_max / ROSTER_LIST_EVERY_DEFAULT)
        assert by_kind["membership", "get"] <= polls_max * (1 + nodes), (nodes, by_kind)
        assert set(op for purpose, op in by_kind if purpose == "membership") <= {"list", "get"}
        # The watcher: the hint and the own slot, conditionally, each tick; a full re-read
        # (the inventory, the head's objects, the audit) every 30th tick.
        assert counts["watcher"] / ticks <= 2.5, (nodes, counts)
        if leader:
            # Idle attempts skipped: the hint and the authority pointer, conditionally.
            assert counts["rebalance"] / ticks <= 3.0, (nodes, counts)
        else:
            # A follower of the lease: the pointer and the new record per renewal interval,
            # now and then one more read when a renewal showed up late.
            assert counts["leadership"] / renewals <= 2.5, (nodes, counts)
