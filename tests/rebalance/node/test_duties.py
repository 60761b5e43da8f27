"""LeaderDuties (rebalance/node/duties.py): a due periodic checkpoint waits in line for
`leader_work` instead of skipping the round while a rebalance attempt holds it (issue 7: a
leader whose attempts ran back to back never checkpointed again, and the faulty-store chaos
round stalled with every event processed and none committed)."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace
from typing import Any

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.rebalance.node.duties import LeaderDuties
from laminar_cluster.rebalance.node.log import NodeLog

ATTEMPT_S = 0.3  # each rebalance attempt holds leader_work this long
POLL_S = 0.2
INTERVAL_S = 1.0


class _Engine:
    def __init__(self, clock: SimulatedClock, lock: asyncio.Lock) -> None:
        self.clock, self.lock = clock, lock
        self.checkpoints: list[float] = []

    def installed_fence(self) -> object:
        return SimpleNamespace(assignment_version=3)

    def installed_drain_transition(self) -> None:
        return None

    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        assert self.lock.locked()  # never beside a rebalance attempt
        self.checkpoints.append(self.clock.monotonic())
        await self.clock.sleep(0.05)
        return CheckpointResult(success=True, epoch=len(self.checkpoints))


def _duties(clock: SimulatedClock, lock: asyncio.Lock, leader: list[bool]) -> Any:
    engine = _Engine(clock, lock)
    controller = SimpleNamespace(
        node_id=1,
        is_leader=lambda: leader[0],
        members_watch=lambda: SimpleNamespace(version=lambda: 1),
        checkpoint_drain_transition=lambda: None,
    )
    ctx = SimpleNamespace(
        clock=clock,
        config=SimpleNamespace(watcher_poll_s=POLL_S, rebalance_debounce_s=0.5),
        head_deadline=lambda: clock.monotonic() + 15.0,
    )
    log = NodeLog(io.StringIO(), clock, 1)
    duties = LeaderDuties(ctx, controller, engine, log, lock, INTERVAL_S, seeded=True)  # type: ignore[arg-type]
    return duties, engine


async def _attempts_back_to_back(clock: SimulatedClock, lock: asyncio.Lock, count: int) -> None:
    """The rebalance loop of a leader whose every attempt outlasts its tick."""
    for _ in range(count):
        async with lock:
            await clock.sleep(ATTEMPT_S)


def test_a_due_checkpoint_waits_in_line_behind_back_to_back_rebalance_attempts() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        lock = asyncio.Lock()
        duties, engine = _duties(clock, lock, [True])
        shutdown = asyncio.Event()
        run_s = 10.0
        async with asyncio.TaskGroup() as group:
            group.create_task(duties.run(shutdown))
            attempts = group.create_task(
                _attempts_back_to_back(clock, lock, round(run_s / ATTEMPT_S))
            )
            await clock.step(run_s, yields=50)
            shutdown.set()
            await clock.step(1.0, yields=50)
            attempts.cancel()
        # One checkpoint per interval, each at most one attempt late.
        assert len(engine.checkpoints) >= run_s / (INTERVAL_S + ATTEMPT_S + POLL_S) - 1
        gaps = [b - a for a, b in zip(engine.checkpoints, engine.checkpoints[1:], strict=False)]
        assert max(gaps) <= INTERVAL_S + ATTEMPT_S + POLL_S + 0.1

    asyncio.run(main())


def test_a_periodic_checkpoint_starts_on_time_not_at_the_next_tick() -> None:
    """The tick is the watcher poll (2 s by default); a periodic checkpoint is due between two
    ticks and starts then (the verdict pointer's hint, DC-18, names that time)."""

    async def main() -> None:
        clock = SimulatedClock(seed=3)
        duties, engine = _duties(clock, asyncio.Lock(), [True])
        duties.ctx.config.watcher_poll_s = 0.7  # ticks at 0, 0.7, 1.4, ...; due every 1.0 s
        shutdown = asyncio.Event()
        started = clock.monotonic()
        async with asyncio.TaskGroup() as group:
            group.create_task(duties.run(shutdown))
            await clock.step(3.5, yields=50)
            shutdown.set()
            await clock.step(1.0, yields=50)
        offsets = [round(t - started, 3) for t in engine.checkpoints[:3]]
        assert offsets == pytest.approx([1.0, 2.0, 3.0], abs=0.02), offsets

    asyncio.run(main())


def test_a_leader_lost_while_waiting_does_not_checkpoint() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        lock = asyncio.Lock()
        leader = [True]
        duties, engine = _duties(clock, lock, leader)
        duties.next_checkpoint_s = clock.monotonic()  # due now
        await lock.acquire()  # a rebalance attempt is running
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(duties.round())
            await clock.step(0.5, yields=20)
            assert not waiting.done()  # in line for the lock
            leader[0] = False
            lock.release()
        assert engine.checkpoints == []

    asyncio.run(main())


def test_dc21_a_quiet_periodic_checkpoint_stays_due_and_runs_at_the_first_busy_tick() -> None:
    """DC-21: while `skip_checkpoint` says quiet, no periodic checkpoint runs and it stays due
    (asked again every tick, logged once per quiet stretch); the first tick after it says busy
    checkpoints, not an interval later."""

    async def main() -> None:
        clock = SimulatedClock(seed=2)
        lock = asyncio.Lock()
        duties, engine = _duties(clock, lock, [True])
        quiet = [True]
        asked: list[float] = []

        def skip(fence: object) -> bool:
            asked.append(clock.monotonic())
            return quiet[0]

        duties.skip_checkpoint = skip
        shutdown = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(duties.run(shutdown))
            await clock.step(5 * INTERVAL_S, yields=50)
            assert engine.checkpoints == []
            assert len(asked) >= 5 * INTERVAL_S / POLL_S - INTERVAL_S / POLL_S - 2  # every tick
            quiet[0] = False
            busy_s = clock.monotonic()
            await clock.step(POLL_S + 0.01, yields=50)
            assert len(engine.checkpoints) == 1
            assert engine.checkpoints[0] - busy_s <= POLL_S + 0.01
            shutdown.set()
            await clock.step(1.0, yields=50)
        assert duties.log._stream.getvalue().count("checkpoints_quiet") == 1

    asyncio.run(main())


def test_dc18_a_periodic_checkpoint_put_off_by_a_rotation_keeps_to_its_grid() -> None:
    """A due periodic checkpoint that cannot start (a drain transition installed: a rotation in
    progress) is put off by exactly one interval from when it was due, where participants expect
    it once more (DC-18); the next after it is one interval later again. A checkpoint due long ago
    (a new leader) is next due one interval from now."""

    async def main() -> None:
        clock = SimulatedClock(seed=5)
        lock = asyncio.Lock()
        duties, engine = _duties(clock, lock, [True])
        draining = [True]
        engine.installed_drain_transition = lambda: object() if draining[0] else None
        duties.ctx.config.watcher_poll_s = 0.3  # ticks off the 1 s grid: 0, 0.3, 0.6, ...
        shutdown = asyncio.Event()
        started = clock.monotonic()
        async with asyncio.TaskGroup() as group:
            group.create_task(duties.run(shutdown))
            await clock.step(0.9, yields=50)
            await lock.acquire()  # the rotation's attempt holds leader_work until 1.2
            await clock.step(0.3, yields=50)
            lock.release()
            await clock.step(0.3, yields=50)  # due at 1.0, asked at 1.2: put off
            assert engine.checkpoints == []
            assert duties.next_checkpoint_s - started == pytest.approx(2.0, abs=0.02)
            draining[0] = False
            await clock.step(1.2, yields=50)
            assert [round(t - started, 2) for t in engine.checkpoints] == pytest.approx([2.0])
            duties.next_checkpoint_s = clock.monotonic() - 10.0  # due long ago
            await clock.step(0.35, yields=50)
            assert len(engine.checkpoints) == 2
            assert duties.next_checkpoint_s - engine.checkpoints[1] == pytest.approx(INTERVAL_S)
            shutdown.set()
            await clock.step(1.0, yields=50)

    asyncio.run(main())
