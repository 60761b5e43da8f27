"""A simulated clock that tests advance by hand.

`monotonic()` only moves when the test calls `advance()` (a jump) or `step()` (which stops at
each timer so the tasks it wakes run at that time).
Sleepers wake, and `timeout_at` blocks expire, in deadline order as time passes them. The random
source is seeded, so a test replays exactly from its seed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from laminar_cluster.clock.api import Clock


class _TimeoutEntry:
    """A pending `timeout_at` block; `inside` turns False when the block is left."""

    __slots__ = ("inside", "timeout")

    def __init__(self, timeout: asyncio.Timeout) -> None:
        self.timeout = timeout
        self.inside = True


class SimulatedClock(Clock):
    """Manual time. Start at `start_s` monotonic and `wall_start_ms` wall time."""

    def __init__(
        self, *, seed: int = 0, start_s: float = 1000.0, wall_start_ms: int = 1_700_000_000_000
    ) -> None:
        self._now = start_s
        self._start = start_s
        self._wall_start_ms = wall_start_ms
        self._random = random.Random(seed)
        self._order = itertools.count()
        # (deadline, order, waiter): a sleeper's future, or a timeout block still inside its body
        self._timers: list[tuple[float, int, asyncio.Future[None] | _TimeoutEntry]] = []

    def monotonic(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall_start_ms + round((self._now - self._start) * 1000)

    @property
    def random(self) -> random.Random:
        return self._random

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self._now + seconds, next(self._order), future))
        await future

    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        return self._timeout_at(deadline)

    @asynccontextmanager
    async def _timeout_at(self, deadline: float) -> AsyncIterator[None]:
        async with asyncio.timeout(None) as timeout:
            entry = _TimeoutEntry(timeout)
            if deadline <= self._now:
                timeout.reschedule(asyncio.get_running_loop().time())
            else:
                heapq.heappush(self._timers, (deadline, next(self._order), entry))
            try:
                yield
            finally:
                entry.inside = False  # the block is left: a later advance must not touch it

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking every timer whose deadline is passed."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock back by {seconds} s")
        target = self._now + seconds
        loop_now = asyncio.get_running_loop().time()
        while self._timers and self._timers[0][0] <= target:
            deadline, _, waiter = heapq.heappop(self._timers)
            self._now = max(self._now, deadline)
            if isinstance(waiter, _TimeoutEntry):
                if waiter.inside and not waiter.timeout.expired():
                    waiter.timeout.reschedule(loop_now)
            elif not waiter.done():
                waiter.set_result(None)
        self._now = target

    def next_deadline(self) -> float | None:
        """The earliest pending timer, or None."""
        return self._timers[0][0] if self._timers else None

    async def step(self, seconds: float, *, yields: int = 10) -> None:
        """Move time forward by `seconds`, stopping at each timer on the way so that the tasks
        it wakes run (and see that time) before time moves on."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock back by {seconds} s")
        target = self._now + seconds
        while True:
            for _ in range(yields):
                await asyncio.sleep(0)
            upcoming = self.next_deadline()
            if upcoming is None or upcoming > target:
                break
            self.advance(max(0.0, upcoming - self._now))
        self.advance(target - self._now)
        for _ in range(yields):
            await asyncio.sleep(0)
