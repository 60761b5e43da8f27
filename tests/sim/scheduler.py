"""The seeded scheduler: simulated time moves only when every task of every node is blocked.

`settle()` runs the event loop until nothing is ready (no callback queued, no asyncio timer
due). `SimClock.next_live_deadline()` is the earliest timer that still has a waiter (a sleeper
not yet cancelled, or a `timeout_at` block still entered); stale entries left by blocks that
exited are dropped on the way, so time jumps straight to the next instant where something can
happen. Everything a node does is driven by that clock, the seeded store faults and the
scenario's random source, so a run is a pure function of its seed.
"""

from __future__ import annotations

import asyncio
import heapq
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Final

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.clock.simulated import _TimeoutEntry

SETTLE_TURNS_MAX: Final = 200_000


class _Deadline:
    """`SimulatedClock.timeout_at` as a plain async context manager (same timers, same order;
    without the generator machinery of `asynccontextmanager`, which the nodes enter a lot)."""

    __slots__ = ("_clock", "_deadline", "_entry", "_timeout")

    def __init__(self, clock: SimClock, deadline: float) -> None:
        self._clock = clock
        self._deadline = deadline

    async def __aenter__(self) -> None:
        timeout = asyncio.timeout(None)
        await timeout.__aenter__()
        entry = _TimeoutEntry(timeout)
        self._timeout, self._entry = timeout, entry
        clock = self._clock
        if self._deadline <= clock.monotonic():
            timeout.reschedule(asyncio.get_running_loop().time())
        else:
            heapq.heappush(clock._timers, (self._deadline, next(clock._order), entry))

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> bool | None:
        self._entry.inside = False  # a later advance must not touch it
        await self._timeout.__aexit__(kind, error, trace)  # raises TimeoutError when expired
        return None


class SimClock(SimulatedClock):
    """`SimulatedClock` whose next deadline skips timers nobody waits for any more."""

    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        return _Deadline(self, deadline)

    def next_live_deadline(self) -> float | None:
        timers = self._timers
        while timers:
            _, _, waiter = timers[0]
            if isinstance(waiter, _TimeoutEntry):
                dead = not waiter.inside or waiter.timeout.expired()
            else:
                dead = waiter.done()
            if not dead:
                return timers[0][0]
            heapq.heappop(timers)
        return None

    def advance_to(self, instant: float) -> None:
        self.advance(max(0.0, instant - self.monotonic()))


def _busy(loop: asyncio.AbstractEventLoop) -> bool:
    """Is a callback queued, or an asyncio timer (a timeout expiring now) pending?"""
    internals: Any = loop
    if internals._ready:
        return True
    return any(not handle.cancelled() for handle in internals._scheduled)


async def settle() -> int:
    """Yield until every other task is blocked; the number of loop turns it took."""
    loop = asyncio.get_running_loop()
    for turn in range(SETTLE_TURNS_MAX):
        await asyncio.sleep(0)
        if not _busy(loop):
            return turn
    raise AssertionError(
        f"the simulation did not settle within {SETTLE_TURNS_MAX} loop turns (a task spins "
        f"without waiting on the clock); ready: {_ready_callbacks(loop)}"
    )


def _ready_callbacks(loop: asyncio.AbstractEventLoop) -> list[str]:
    internals: Any = loop
    shown = [repr(handle)[:300] for handle in list(internals._ready)[:8]]
    shown += [repr(handle)[:300] for handle in internals._scheduled[:8] if not handle.cancelled()]
    return shown


async def turns(count: int) -> None:
    """Let the other tasks run for `count` loop turns (a crash lands mid-operation)."""
    for _ in range(count):
        await asyncio.sleep(0)
