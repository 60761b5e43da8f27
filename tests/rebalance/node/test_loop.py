"""The controller loop (spec_rebalance §4.2, §7 T31-T34): leader-only attempts, debounce,
the audit tick and retries, on a simulated clock over memory://."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.node.loop import RebalanceLoop
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.store import ObjectStore, open_store
from tests.rebalance.scenario import Scenario, synchronous

QUIET_TICKS = RebalanceConfig(
    watcher_poll_s=100.0,
    rebalance_debounce_s=0.5,
    checkpoint_timeout_s=30.0,
    retry_delay_s=0.5,
    drain_ack_timeout_s=101.0,
)


class Recorder:
    """An attempt that records when it ran and fails the first `failures` times."""

    def __init__(self, clock: SimulatedClock, failures: int = 0) -> None:
        self.clock = clock
        self.failures = failures
        self.times: list[float] = []

    async def __call__(self, ctx: RebalanceContext, live: Sequence[int]) -> int | None:
        self.times.append(self.clock.monotonic())
        if len(self.times) <= self.failures:
            raise StoreUnavailable("injected attempt failure")
        return None


def memory() -> ObjectStore:
    return open_store("memory://")


async def run_for(scenario: Scenario, loop: RebalanceLoop, seconds: float) -> asyncio.Event:
    """Start `loop`, move simulated time by `seconds`, stop it."""
    shutdown = asyncio.Event()
    task = asyncio.create_task(loop.run(shutdown))
    await scenario.cluster.advance(seconds, step_s=0.05)
    shutdown.set()
    await task
    return shutdown


@synchronous
async def test_t31_follower_noop() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=1), (1, 2))
    await scenario.bring_up((1, 1, 1, 1), leader=2)
    recorder = Recorder(scenario.clock)
    loop = RebalanceLoop(scenario.ctx(1), recorder)
    await scenario.cluster.add(3)
    await run_for(scenario, loop, 3.0)
    assert recorder.times == []


@synchronous
async def test_t32_debounce_coalesces() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=2), (1, 2), config=QUIET_TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    recorder = Recorder(scenario.clock)
    cluster = scenario.cluster
    shutdown = asyncio.Event()
    task = asyncio.create_task(RebalanceLoop(scenario.ctx(1), recorder).run(shutdown))
    await cluster.advance(0.05, step_s=0.05)
    assert len(recorder.times) == 1  # the first audit tick is immediate
    last_change = 0.0
    for node_id in (3, 4, 5):
        await cluster.add(node_id)
        await cluster.refresh()
        last_change = scenario.clock.monotonic()
        await cluster.advance(0.1, step_s=0.05)
    await cluster.advance(1.5, step_s=0.05)
    shutdown.set()
    await task
    after = recorder.times[1:]
    assert len(after) == 1, recorder.times
    assert after[0] >= last_change + 0.5


@synchronous
async def test_t33_audit_tick_without_membership_change() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=3), (1, 2))
    await scenario.bring_up((1, 1, 1, 1))
    assert await try_rebalance(scenario.ctx(1), [1, 2]) == 2
    await scenario.cluster.elect(2)
    engine = scenario.engines[2]
    assert engine.registry().version == 1
    loop = RebalanceLoop(scenario.ctx(2))
    await run_for(scenario, loop, scenario.config.watcher_poll_s)
    assert engine.registry().version == 2
    assert loop.last_error is None


@synchronous
async def test_t34_retry_until_success() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=4), (1, 2), config=QUIET_TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    recorder = Recorder(scenario.clock, failures=2)
    await run_for(scenario, RebalanceLoop(scenario.ctx(1), recorder), 2.0)
    assert len(recorder.times) == 3
    gaps = [b - a for a, b in zip(recorder.times, recorder.times[1:], strict=False)]
    assert all(abs(gap - QUIET_TICKS.retry_delay_s) < 0.06 for gap in gaps), gaps


@synchronous
async def test_t34_losing_leadership_mid_retry_stops_the_loop() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=5), (1, 2), config=QUIET_TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    recorder = Recorder(scenario.clock, failures=1000)
    cluster = scenario.cluster
    shutdown = asyncio.Event()
    task = asyncio.create_task(RebalanceLoop(scenario.ctx(1), recorder).run(shutdown))
    await cluster.advance(0.8, step_s=0.05)
    assert len(recorder.times) == 2
    cluster.node(1).leadership.set(None)
    await cluster.advance(3.0, step_s=0.05)
    shutdown.set()
    await task
    assert len(recorder.times) == 2
