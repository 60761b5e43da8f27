"""LeaderDuties: a periodic checkpoint overdue by CHECKPOINT_OVERDUE_INTERVALS waits for
`leader_work` (on a slow store the rebalance loop's audit attempt holds the lock for most of
every tick); one merely due skips a taken lock, leaving the rotation attempts their turns."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from laminar_cluster.clock import RealClock
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.rebalance.node_duties import CHECKPOINT_OVERDUE_INTERVALS, LeaderDuties


@dataclass
class _Config:
    watcher_poll_s: float = 1.0
    checkpoint_timeout_s: float = 5.0


@dataclass
class _Context:
    clock: RealClock = field(default_factory=RealClock)
    config: _Config = field(default_factory=_Config)

    def head_deadline(self) -> float:
        return self.clock.monotonic() + self.config.checkpoint_timeout_s


@dataclass
class _Watch:
    def version(self) -> int:
        return 1


@dataclass
class _Controller:
    leader: bool = True

    def is_leader(self) -> bool:
        return self.leader

    def members_watch(self) -> _Watch:
        return _Watch()

    def checkpoint_drain_transition(self) -> None:
        return None


@dataclass
class _Engine:
    calls: int = 0

    def installed_fence(self) -> object:
        return object()

    def installed_drain_transition(self) -> None:
        return None

    async def checkpoint_until(self, *, deadline: float) -> CheckpointResult:
        self.calls += 1
        return cast(CheckpointResult, _Result())


@dataclass
class _Result:
    success: bool = True
    epoch: int = 1


@dataclass
class _Log:
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def write(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def _duties(controller: _Controller, engine: _Engine, lock: asyncio.Lock) -> LeaderDuties:
    fence = type("Fence", (), {"assignment_version": 3})()
    engine.installed_fence = lambda: fence  # type: ignore[method-assign]
    return LeaderDuties(
        ctx=cast(Any, _Context()),
        controller=cast(Any, controller),
        engine=cast(Any, engine),
        log=cast(Any, _Log()),
        leader_work=lock,
        checkpoint_interval_s=1.0,
        seeded=True,
        next_checkpoint_s=0.0,  # overdue by far
    )


def test_an_overdue_checkpoint_waits_for_the_rebalance_attempt_holding_leader_work() -> None:
    async def main() -> int:
        lock, engine = asyncio.Lock(), _Engine()
        duties = _duties(_Controller(), engine, lock)
        await lock.acquire()  # a rebalance attempt in progress
        async with asyncio.TaskGroup() as group:
            round_ = group.create_task(duties.round())
            for _ in range(5):
                await asyncio.sleep(0)
            assert not round_.done()  # waiting, not skipped
            assert engine.calls == 0  # never inside the attempt
            lock.release()
        return engine.calls

    assert asyncio.run(main()) == 1


def test_a_checkpoint_not_due_does_not_wait_for_leader_work() -> None:
    async def main() -> int:
        lock, engine = asyncio.Lock(), _Engine()
        duties = _duties(_Controller(), engine, lock)
        duties.next_checkpoint_s = duties.ctx.clock.monotonic() + 3600
        await lock.acquire()
        await asyncio.wait_for(duties.round(), timeout=5)
        lock.release()
        return engine.calls

    assert asyncio.run(main()) == 0


def test_leadership_lost_while_waiting_means_no_checkpoint() -> None:
    async def main() -> int:
        lock, engine, controller = asyncio.Lock(), _Engine(), _Controller()
        duties = _duties(controller, engine, lock)
        await lock.acquire()
        async with asyncio.TaskGroup() as group:
            group.create_task(duties.round())
            for _ in range(5):
                await asyncio.sleep(0)
            controller.leader = False
            lock.release()
        return engine.calls

    assert asyncio.run(main()) == 0


def test_a_checkpoint_due_but_not_overdue_skips_a_taken_lock() -> None:
    async def main() -> tuple[int, int]:
        lock, engine = asyncio.Lock(), _Engine()
        duties = _duties(_Controller(), engine, lock)
        interval_s = duties.checkpoint_interval_s
        # Due half an interval ago: well inside the overdue margin.
        duties.next_checkpoint_s = duties.ctx.clock.monotonic() - interval_s / 2
        assert CHECKPOINT_OVERDUE_INTERVALS >= 2
        await lock.acquire()
        await asyncio.wait_for(duties.round(), timeout=5)  # returns at once
        skipped = engine.calls
        lock.release()
        await duties.round()  # the lock is free: the due checkpoint runs
        return skipped, engine.calls

    assert asyncio.run(main()) == (0, 1)
