"""Node startup under store faults (rebalance/node/startup.py, RebalanceNode.run; issue 7):
every startup step is retried on StoreUnavailable until one deadline, a failure no retry fixes
ends the process with a clear `startup_failed` event and exit 5, never a traceback.

The store is a `FaultyStore` over the simulation's in-process store (its requests never leave
the event loop, so simulated time cannot outrun them on a loaded host); outages are windows of
simulated time in which every request fails before it is applied."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import CorruptRecord, DeadlineExceeded
from laminar_cluster.membership import NodeState, ProcessLeaseHolder, read_node_record
from laminar_cluster.membership.discovery import Discovery
from laminar_cluster.membership.paths import NODES_PREFIX, node_lease_path
from laminar_cluster.membership.process_lease import PROCESS_LEASE_ATTEMPTS_MAX
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import (
    EXIT_STARTUP_FAILED,
    EXIT_STOPPED,
    NodeConfig,
    RebalanceNode,
)
from laminar_cluster.rebalance.node.startup import acquire_lease, activate_lease, first_members
from laminar_cluster.store import OVERWRITE
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from tests.sim.store import SimStore

T = TypeVar("T")
TTL_S = 2.0
TICK_S = 0.01


def _faulty(clock: SimulatedClock, *outages: tuple[float, float]) -> FaultyStore:
    """A memory store failing every request in each (start, end) window, relative to now."""
    now = clock.monotonic()
    windows = tuple((now + start, now + end) for start, end in outages)
    return FaultyStore(
        SimStore.fresh(clock), clock=clock, seed=1, config=FaultConfig(outages=windows)
    )


async def _drive(
    clock: SimulatedClock, work: Awaitable[T], *, limit_s: float = 120.0, tick_s: float = TICK_S
) -> T:
    """Run `work` while simulated time moves in ticks (real store I/O finishes between ticks);
    its result, or its exception re-raised as is."""

    async def captured() -> T | Exception:
        try:
            return await work
        except Exception as error:
            return error

    async with asyncio.TaskGroup() as group:
        task = group.create_task(captured())
        for _ in range(round(limit_s / tick_s)):
            if task.done():
                break
            await asyncio.sleep(0)
            await clock.step(tick_s)
    outcome = task.result()
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def test_acquire_outlasts_an_outage_longer_than_its_own_attempts() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        store = _faulty(clock, (0.0, 1.5))
        holder = ProcessLeaseHolder(store, clock, 7, ttl_s=TTL_S)
        acquired = await _drive(
            clock, acquire_lease(holder, clock, deadline=clock.monotonic() + 30)
        )
        stored = await read_node_record(store.inner, 7)
        assert stored is not None and stored.record == acquired.record
        # The lease's own loop gives up after PROCESS_LEASE_ATTEMPTS_MAX failed reads: the
        # outage failed more requests than that, so the startup retry carried it.
        assert store.stats.injected[FaultKind.BEFORE] > PROCESS_LEASE_ATTEMPTS_MAX
        assert clock.monotonic() >= 1000.0 + 1.5

    asyncio.run(main())


def test_activate_and_first_members_outlast_an_outage() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=3)
        store = _faulty(clock, (0.05, 1.2))
        holder = ProcessLeaseHolder(store, clock, 7, ttl_s=TTL_S)
        await holder.acquire(deadline=clock.monotonic() + 1)
        clock.advance(0.05)  # into the outage
        deadline = clock.monotonic() + 30
        await _drive(clock, activate_lease(holder, clock, deadline=deadline))
        assert holder.record.state is NodeState.ACTIVE
        failed = store.stats.injected[FaultKind.BEFORE]
        assert failed > PROCESS_LEASE_ATTEMPTS_MAX

        store.config = FaultConfig(outages=((clock.monotonic(), clock.monotonic() + 0.5),))
        discovery = Discovery(store, clock)
        view = await _drive(clock, _first_view(discovery, clock, deadline))
        assert [member.node for member in view.members] == [7]
        assert store.stats.injected[FaultKind.BEFORE] > failed

    asyncio.run(main())


async def _first_view(discovery: Discovery, clock: SimulatedClock, deadline: float) -> Any:
    class _Controller:  # the part of StoreClusterController that first_members uses
        node_id = 7

        async def refresh_members(self, *, deadline: float) -> Any:
            return await discovery.poll(deadline=deadline)

    return await first_members(_Controller(), clock, deadline=deadline)  # type: ignore[arg-type]


def test_startup_gives_up_at_its_deadline() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=4)
        store = _faulty(clock, (0.0, 60.0))
        holder = ProcessLeaseHolder(store, clock, 7, ttl_s=TTL_S)
        with pytest.raises(DeadlineExceeded, match="acquiring the process lease"):
            await _drive(clock, acquire_lease(holder, clock, deadline=clock.monotonic() + 3))
        assert clock.monotonic() <= 1000.0 + 3 + TICK_S

    asyncio.run(main())


def test_a_corrupt_lease_record_is_not_retried() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=5)
        store = CountingStore(SimStore.fresh(clock))
        await store.put(node_lease_path(7), b'{"version":1}', OVERWRITE)
        store.reset()
        holder = ProcessLeaseHolder(store, clock, 7, ttl_s=TTL_S)
        with pytest.raises(CorruptRecord):
            await _drive(clock, acquire_lease(holder, clock, deadline=clock.monotonic() + 30))
        assert store.total == 1  # one read, no retry

    asyncio.run(main())


def _node(store: FaultyStore, clock: SimulatedClock) -> tuple[RebalanceNode, io.StringIO]:
    out = io.StringIO()
    config = NodeConfig(node_id=1, ttl_s=TTL_S, poll_s=0.2, debounce_s=0.5, retry_delay_s=0.5)
    return RebalanceNode(store, clock, config, NodeLog(out, clock, 1)), out


def _events(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_node_survives_a_fault_on_its_first_membership_refresh() -> None:
    """The crash of the faulty-store chaos run: StoreUnavailable on the first listing."""

    async def main() -> None:
        clock = SimulatedClock(seed=6)
        store = _faulty(clock)
        for _ in range(3):
            store.fail_next(FaultKind.BEFORE, op="list", key_prefix=NODES_PREFIX)
        node, out = _node(store, clock)

        async def run_until_members() -> int:
            async with asyncio.TaskGroup() as group:
                running = group.create_task(node.run())
                while node.controller is None or node.controller.membership_view() is None:
                    await clock.sleep(TICK_S)
                    assert not running.done(), _events(out)
                node.stop()
            return running.result()

        assert await _drive(clock, run_until_members()) == EXIT_STOPPED
        events = [event["event"] for event in _events(out)]
        assert "crashed" not in events and "startup_failed" not in events
        assert events[:2] == ["acquired", "active"]
        view = node.controller.membership_view() if node.controller else None
        assert view is not None and [m.node for m in view.members] == [1]

    asyncio.run(main())


def test_node_that_cannot_start_exits_5_with_a_clear_event() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=7)
        store = _faulty(clock, (0.0, 600.0))
        node, out = _node(store, clock)
        assert await _drive(clock, node.run(), tick_s=0.1) == EXIT_STARTUP_FAILED
        events = _events(out)
        failed = [event for event in events if event["event"] == "startup_failed"]
        assert len(failed) == 1 and failed[0]["kind"] == "DeadlineExceeded"
        assert "acquiring the process lease" in failed[0]["error"]
        assert events[-1]["event"] == "stopped" and events[-1]["exit_code"] == 5

    asyncio.run(main())
