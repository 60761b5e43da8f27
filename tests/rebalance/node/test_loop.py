"""The controller loop (RB §4.2, RB-T31..RB-T34): leader-only attempts, debounce,
the audit tick and retries, on a simulated clock over memory://; and what a failed attempt
does by the kind of its error (rebalance/node/loop.py): retry, stop on Fenced, report
CorruptRecord, propagate a bug."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import msgspec
import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    Contended,
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    InventoryChanged,
    LaminarError,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.node.loop import RebalanceLoop
from laminar_cluster.rebalance.refusals import Refusal
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


# The audit tick every 2 s, a retry after 0.25 s: a retry and a tick are told apart by time.
TICKS = RebalanceConfig(
    watcher_poll_s=2.0,
    rebalance_debounce_s=0.5,
    checkpoint_timeout_s=30.0,
    retry_delay_s=0.25,
    drain_ack_timeout_s=3.0,
)


class Recorder:
    """An attempt that records when it ran and fails the first `failures` times with
    `error()` (StoreUnavailable by default)."""

    def __init__(
        self,
        clock: SimulatedClock,
        failures: int = 0,
        error: Callable[[], BaseException] = lambda: StoreUnavailable("injected attempt failure"),
    ) -> None:
        self.clock = clock
        self.failures = failures
        self.error = error
        self.times: list[float] = []

    async def __call__(self, ctx: RebalanceContext, live: Sequence[int]) -> int | None:
        self.times.append(self.clock.monotonic())
        if len(self.times) <= self.failures:
            raise self.error()
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
async def test_rb_t31_follower_noop() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=1), (1, 2))
    await scenario.bring_up((1, 1, 1, 1), leader=2)
    recorder = Recorder(scenario.clock)
    loop = RebalanceLoop(scenario.ctx(1), recorder)
    await scenario.cluster.add(3)
    await run_for(scenario, loop, 3.0)
    assert recorder.times == []


@synchronous
async def test_rb_t32_debounce_coalesces() -> None:
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
async def test_rb_t33_audit_tick_without_membership_change() -> None:
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
async def test_rb_t34_retry_until_success() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=4), (1, 2), config=QUIET_TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    recorder = Recorder(scenario.clock, failures=2)
    await run_for(scenario, RebalanceLoop(scenario.ctx(1), recorder), 2.0)
    assert len(recorder.times) == 3
    gaps = [b - a for a, b in zip(recorder.times, recorder.times[1:], strict=False)]
    assert all(abs(gap - QUIET_TICKS.retry_delay_s) < 0.06 for gap in gaps), gaps


@synchronous
async def test_rb_t34_losing_leadership_mid_retry_stops_the_loop() -> None:
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


@pytest.mark.parametrize(
    "error",
    [
        lambda: StoreUnavailable("injected"),
        lambda: DeadlineExceeded("injected"),
        lambda: Contended("injected"),
        lambda: Refused("injected", reason=Refusal.ACK_QUORUM_MISSED),
        lambda: WriteOutcomeUnknown("injected", key="k"),
        lambda: InventoryChanged("injected"),
    ],
)
def test_retryable_kinds_are_retried_after_retry_delay(
    error: Callable[[], LaminarError],
) -> None:
    @synchronous
    async def main() -> None:
        config = QUIET_TICKS
        scenario = await Scenario.start(memory(), SimulatedClock(seed=6), (1, 2), config=config)
        await scenario.bring_up((1, 1, 1, 1))
        recorder = Recorder(scenario.clock, failures=2, error=error)
        await run_for(scenario, RebalanceLoop(scenario.ctx(1), recorder), 2.0)
        assert len(recorder.times) == 3
        gaps = [b - a for a, b in zip(recorder.times, recorder.times[1:], strict=False)]
        assert all(abs(gap - config.retry_delay_s) < 0.06 for gap in gaps), gaps

    main()


@synchronous
async def test_fenced_stops_leader_work_until_a_new_term() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=7), (1, 2), config=TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    recorder = Recorder(scenario.clock, failures=1000, error=lambda: Fenced("a newer term won"))
    loop = RebalanceLoop(scenario.ctx(1), recorder)
    leadership = scenario.cluster.node(1).leadership
    proof = leadership.proof()
    assert proof is not None
    shutdown = asyncio.Event()
    task = asyncio.create_task(loop.run(shutdown))
    # The manager still grants the fenced term: no retry, and no tick acts under it again.
    await scenario.cluster.advance(4.5, step_s=0.05)
    assert len(recorder.times) == 1 and loop.fenced_proof == proof
    assert isinstance(loop.last_error, Fenced)
    # A new term of this process resumes at the next tick.
    leadership.set(msgspec.structs.replace(proof, fencing_token=proof.fencing_token + 1))
    await scenario.cluster.advance(2.0, step_s=0.05)
    shutdown.set()
    await task
    assert len(recorder.times) == 2


@synchronous
async def test_fenced_after_the_grant_was_withdrawn_acts_again_when_regranted() -> None:
    """A Fenced raised because leadership went away mid-attempt (the ordinary loss) does not
    blacklist the proof: the same term granted again acts at the next tick."""
    scenario = await Scenario.start(memory(), SimulatedClock(seed=8), (1, 2), config=TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    leadership = scenario.cluster.node(1).leadership
    proof = leadership.proof()
    times: list[float] = []

    async def withdrawn(ctx: RebalanceContext, live: Sequence[int]) -> int | None:
        times.append(scenario.clock.monotonic())
        if len(times) == 1:
            leadership.set(None)
            raise Fenced("graceful rotation requires a live leader proof")
        return None

    loop = RebalanceLoop(scenario.ctx(1), withdrawn)
    shutdown = asyncio.Event()
    task = asyncio.create_task(loop.run(shutdown))
    await scenario.cluster.advance(1.0, step_s=0.05)
    assert len(times) == 1 and loop.fenced_proof is None
    leadership.set(proof)
    await scenario.cluster.advance(1.5, step_s=0.05)
    shutdown.set()
    await task
    assert len(times) == 2


@pytest.mark.parametrize(
    "error",
    [
        lambda: CorruptRecord("assignment 2 is foreign", key="control/x", reason=None),
        lambda: InvalidArgument("recovery assignment 3 removes no predecessor process"),
    ],
)
def test_corrupt_records_and_other_kinds_are_reported_once_and_not_retried(
    error: Callable[[], LaminarError], caplog: pytest.LogCaptureFixture
) -> None:
    @synchronous
    async def main() -> None:
        scenario = await Scenario.start(memory(), SimulatedClock(seed=9), (1, 2), config=TICKS)
        await scenario.bring_up((1, 1, 1, 1))
        recorder = Recorder(scenario.clock, failures=1000, error=error)
        with caplog.at_level(logging.DEBUG, logger="laminar_cluster.rebalance.node.loop"):
            await run_for(scenario, RebalanceLoop(scenario.ctx(1), recorder), 4.5)
        # Only the audit ticks (0, 2, 4 s) try again: no retry after retry_delay.
        assert [round(t - recorder.times[0], 1) for t in recorder.times] == [0.0, 2.0, 4.0]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1  # once while it persists, not per tick
        assert str(error()) in errors[0].getMessage()
        if isinstance(error(), CorruptRecord):
            assert "control/x" in errors[0].getMessage()  # the object is named

    main()


@synchronous
async def test_an_error_that_is_not_a_laminar_error_is_a_bug_and_propagates() -> None:
    scenario = await Scenario.start(memory(), SimulatedClock(seed=10), (1, 2), config=TICKS)
    await scenario.bring_up((1, 1, 1, 1))
    bug = ValueError("a bug")
    recorder = Recorder(scenario.clock, failures=1, error=lambda: bug)
    shutdown = asyncio.Event()
    task = asyncio.create_task(RebalanceLoop(scenario.ctx(1), recorder).run(shutdown))
    await scenario.cluster.advance(1.0, step_s=0.05)
    assert task.done() and task.exception() is bug
    assert len(recorder.times) == 1
