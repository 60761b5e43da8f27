"""Simulation support for the lease manager tests: a SimulatedClock whose timeouts may end
early, per-process clocks with their own monotonic origin and wall offset, a store wrapper that
tracks requests in flight (and can hold a response, pause at random, or serialise requests),
an authority wrapper that stalls the process around its operations, and a driver.

Simulated time moves only when nothing is in flight at the real store (obstore's memory store
and the file store answer from other threads), so every run replays from its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.lease.manager import LeaderLeaseAuthority
from laminar_cluster.lease.outcomes import LeaderLeaseObservation, LeaseOutcome
from laminar_cluster.lease.records import LeaderLease, LeaderLeaseOwner
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult

T = TypeVar("T")


class SimClock(SimulatedClock):
    """SimulatedClock with a `timeout_at` that survives blocks exiting before the deadline.

    SimulatedClock.timeout_at keeps the asyncio.Timeout in its timer heap after the block
    exits; a later advance() past the deadline then calls reschedule() on a finished Timeout
    and raises RuntimeError (reported to the lead). Here the heap holds a future instead,
    cancelled when the block exits, whose callback expires the Timeout only while entered.
    """

    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        return self._alarm_timeout_at(deadline)

    @asynccontextmanager
    async def _alarm_timeout_at(self, deadline: float) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as timeout:
            if deadline <= self.monotonic():
                timeout.reschedule(loop.time())
                yield
                return

            def expire(alarm: asyncio.Future[None]) -> None:
                if alarm.cancelled():
                    return
                with contextlib.suppress(RuntimeError):  # the block already exited
                    timeout.reschedule(loop.time())

            alarm: asyncio.Future[None] = loop.create_future()
            alarm.add_done_callback(expire)
            heapq.heappush(self._timers, (deadline, next(self._order), alarm))
            try:
                yield
            finally:
                alarm.cancel()


class SkewedClock(Clock):
    """One simulated process: the shared base time seen through its own monotonic origin and
    wall-clock offset, with its own random source."""

    def __init__(
        self, base: SimClock, *, monotonic_offset_s: float, wall_offset_ms: int, seed: int
    ) -> None:
        self._base = base
        self._monotonic_offset_s = monotonic_offset_s
        self._wall_offset_ms = wall_offset_ms
        self._random = random.Random(seed)

    def monotonic(self) -> float:
        return self._base.monotonic() + self._monotonic_offset_s

    def wall_ms(self) -> int:
        return self._base.wall_ms() + self._wall_offset_ms

    async def sleep(self, seconds: float) -> None:
        await self._base.sleep(seconds)

    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        return self._base.timeout_at(deadline - self._monotonic_offset_s)

    @property
    def random(self) -> random.Random:
        return self._random


class TrackedStore(ObjectStore):
    """Counts requests in flight at the inner store; can hold the response of the next put on
    a key prefix (the write is applied, the answer waits), pause requests at random, and
    serialise requests of several wrappers (so racing requests resolve in a replayable order)."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        pause_probability: float = 0.0,
        pause_max_s: float = 0.0,
        serial: asyncio.Lock | None = None,
    ) -> None:
        self.inner = inner
        self._serial = serial  # shared by the simulated processes: one request at a time
        self.requests: Counter[str] = Counter()
        self.inflight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self._clock = clock
        self._rng = rng
        self._pause_probability = pause_probability
        self._pause_max_s = pause_max_s
        self._held: list[tuple[str, asyncio.Event, asyncio.Event]] = []

    @property
    def url(self) -> str:
        return self.inner.url

    def hold_next_put_response(self, key_prefix: str) -> tuple[asyncio.Event, asyncio.Event]:
        """(applied, release): `applied` is set once the put landed; its answer waits for
        `release`."""
        applied, release = asyncio.Event(), asyncio.Event()
        self._held.append((key_prefix, applied, release))
        return applied, release

    async def _pause(self) -> None:
        if (
            self._rng is None
            or self._clock is None
            or self._rng.random() >= self._pause_probability
        ):
            return
        units = self._rng.randrange(1, max(2, int(self._pause_max_s * 64)))
        await self._clock.sleep(units / 64)  # dyadic: simulated instants stay exact

    async def _call(self, kind: str, request: Callable[[], Awaitable[T]]) -> T:
        self.requests[kind] += 1
        await self._pause()
        self.inflight += 1
        self.idle.clear()
        try:
            if self._serial is None:
                result = await request()
            else:
                async with self._serial:  # FIFO: the order of requests replays from the seed
                    result = await request()
        finally:
            self.inflight -= 1
            if self.inflight == 0:
                self.idle.set()
        await self._pause()
        return result

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self._call("get", lambda: self.inner.get(key, end=end))

    async def head(self, key: str) -> ObjectMeta:
        return await self._call("head", lambda: self.inner.head(key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        result = await self._call("put", lambda: self.inner.put(key, body, mode))
        for index, (prefix, applied, release) in enumerate(self._held):
            if key.startswith(prefix):
                del self._held[index]
                applied.set()
                await release.wait()
                break
        return result

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self._call("list", lambda: self.inner.list(prefix, offset=offset, limit=limit))

    async def delete(self, key: str) -> None:
        await self._call("delete", lambda: self.inner.delete(key))


async def settle(stores: Iterable[TrackedStore] = (), *, quiet_yields: int = 30) -> None:
    """Run every task until none can make progress without time moving: `quiet_yields`
    consecutive loop turns with no request in flight at a real store."""
    tracked = list(stores)
    quiet = 0
    for _ in range(100_000):
        if quiet >= quiet_yields:
            return
        await asyncio.sleep(0)
        busy = [store for store in tracked if store.inflight]
        if busy:
            quiet = 0
            for store in busy:
                await asyncio.wait_for(store.idle.wait(), timeout=10)
        else:
            quiet += 1
    raise AssertionError("the simulation never settled")


async def drive(
    clock: SimClock,
    seconds: float,
    *,
    stores: Iterable[TrackedStore] = (),
    check: Callable[[], None] | None = None,
) -> None:
    """Move simulated time forward by `seconds`, stopping at every timer; after each stop the
    tasks settle and `check` (if given) runs."""
    tracked = list(stores)
    target = clock.monotonic() + seconds
    for _ in range(1_000_000):
        await settle(tracked)
        if check is not None:
            check()
        upcoming = clock.next_deadline()
        if upcoming is None or upcoming > target:
            clock.advance(target - clock.monotonic())
            await settle(tracked)
            if check is not None:
                check()
            return
        clock.advance(max(0.0, upcoming - clock.monotonic()))
    raise AssertionError("drive() did not reach its target")


class PausingAuthority:
    """A process that stalls at random around its lease operations: before sending one, and
    after its answer arrived but before the manager sees it (a GC pause on the response path,
    outside the authority's own deadline)."""

    def __init__(
        self, inner: LeaderLeaseAuthority, *, clock: Clock, rng: random.Random, probability: float
    ) -> None:
        self.inner = inner
        self._clock = clock
        self._rng = rng
        self._probability = probability
        self._stall_s = 0.0

    @property
    def ttl_s(self) -> float:
        return self.inner.ttl_s

    def stall_next_response(self, seconds: float) -> None:
        """The next operation's answer reaches the manager `seconds` late."""
        self._stall_s = seconds

    async def _pause(self) -> None:
        if self._rng.random() < self._probability:
            await self._clock.sleep(self._rng.randrange(1, 128) / 64)  # up to 2 s

    async def _paused(self, operation: Callable[[], Awaitable[LeaseOutcome]]) -> LeaseOutcome:
        await self._pause()
        outcome = await operation()
        stall_s, self._stall_s = self._stall_s, 0.0
        if stall_s:
            await self._clock.sleep(stall_s)
        await self._pause()
        return outcome

    async def load(self) -> LeaderLease | None:
        await self._pause()
        lease = await self.inner.load()
        await self._pause()
        return lease

    async def observe(self, *, successor: bool = False) -> LeaderLease | None:
        await self._pause()
        lease = await self.inner.observe(successor=successor)
        await self._pause()
        return lease

    async def begin_new_term(self, owner: LeaderLeaseOwner, *, deadline: float) -> LeaseOutcome:
        return await self._paused(lambda: self.inner.begin_new_term(owner, deadline=deadline))

    async def renew_exact(
        self, owner: LeaderLeaseOwner, token: int, *, deadline: float
    ) -> LeaseOutcome:
        return await self._paused(lambda: self.inner.renew_exact(owner, token, deadline=deadline))

    def observe_rival(self, owner: LeaderLeaseOwner, lease: LeaderLease) -> LeaderLeaseObservation:
        return self.inner.observe_rival(owner, lease)

    async def try_takeover(
        self, owner: LeaderLeaseOwner, observation: LeaderLeaseObservation, *, deadline: float
    ) -> LeaseOutcome:
        return await self._paused(
            lambda: self.inner.try_takeover(owner, observation, deadline=deadline)
        )
