"""Test support for the lease manager: owners, a scripted fake authority (the lease
operations of LA §4.3 on one in-memory lease), and a harness running one manager.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord, Fenced, InvalidArgument, LaminarError
from laminar_cluster.lease.candidacy import CandidacyWatch
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.manager import (
    LeaderLeaseAuthority,
    LeaderLeaseManager,
    LeaseManagerConfig,
)
from laminar_cluster.lease.outcomes import Acquired, Held, LeaderLeaseObservation, LeaseOutcome
from laminar_cluster.lease.records import LeaderLease, LeaderLeaseOwner
from laminar_cluster.store import ObjectStore
from tests.lease.manager_sim import SimClock, TrackedStore, drive, settle

TTL = 1.0
RENEW = 0.25
TICK = 1 / 64
CONFIG = LeaseManagerConfig(ttl_s=TTL, renew_interval_s=RENEW)


def owner(node: int, boot: int = 1, term: int = 1) -> LeaderLeaseOwner:
    return LeaderLeaseOwner(node=node, boot=str(uuid.UUID(int=boot, version=4)), process_term=term)


class FakeAuthority:
    """The lease operations of LA §4.3 on one in-memory lease, with scripted faults:
    `hang` blocks an operation until it is cancelled, `respond_after_s` applies it and answers
    later, `errors` raises queued errors first. `calls` and `cancelled` record what happened."""

    def __init__(self, clock: Clock, ttl_s: float) -> None:
        self.clock = clock
        self.ttl_s = ttl_s
        self.lease: LeaderLease | None = None
        self.calls: list[str] = []
        self.call_times: list[float] = []
        self.cancelled: list[str] = []
        self.hang: set[str] = set()
        self.respond_after_s: dict[str, float] = {}
        self.errors: dict[str, list[LaminarError]] = {}

    async def load(self) -> LeaderLease | None:
        self.calls.append("load")
        self.call_times.append(self.clock.monotonic())
        return self.lease

    async def observe(self, *, successor: bool = False) -> LeaderLease | None:
        """The one lease is always published: observing it is loading it."""
        return await self.load()

    async def begin_new_term(self, owner: LeaderLeaseOwner, *, deadline: float) -> LeaseOutcome:
        return await self._run("begin_new_term", lambda: self._begin(owner))

    async def renew_exact(
        self, owner: LeaderLeaseOwner, token: int, *, deadline: float
    ) -> LeaseOutcome:
        return await self._run("renew_exact", lambda: self._renew(owner, token))

    def observe_rival(self, owner: LeaderLeaseOwner, lease: LeaderLease) -> LeaderLeaseObservation:
        if lease.owner == owner:
            raise InvalidArgument("leader takeover observation must belong to a rival")
        return LeaderLeaseObservation(lease=lease, started_s=self.clock.monotonic())

    async def try_takeover(
        self, owner: LeaderLeaseOwner, observation: LeaderLeaseObservation, *, deadline: float
    ) -> LeaseOutcome:
        return await self._run("try_takeover", lambda: self._takeover(owner, observation))

    def install(self, owner: LeaderLeaseOwner, *, token: int = 1) -> LeaderLease:
        """Make `owner` the current holder (a rival the manager will meet)."""
        seq = 1 if self.lease is None else self.lease.seq + 1
        self.lease = self._lease(seq, seq, token, owner)
        return self.lease

    async def _run(self, name: str, apply: Callable[[], LeaseOutcome]) -> LeaseOutcome:
        self.calls.append(name)
        self.call_times.append(self.clock.monotonic())
        try:
            if name in self.hang:
                await asyncio.Event().wait()
            queued = self.errors.get(name)
            if queued:
                raise queued.pop(0)
            outcome = apply()
            delay = self.respond_after_s.pop(name, None)
            if delay is not None:
                await self.clock.sleep(delay)
            return outcome
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise

    def _lease(self, seq: int, renewal: int, token: int, owner: LeaderLeaseOwner) -> LeaderLease:
        expires_at_ms = self.clock.wall_ms() + round(self.ttl_s * 1000)
        return LeaderLease(
            seq=seq,
            renewal_sequence=renewal,
            token=token,
            owner=owner,
            expires_at_ms=expires_at_ms,
            catalog_manifest=None,
        )

    def _next(self, owner: LeaderLeaseOwner, token: int) -> Acquired:
        head = self.lease
        assert head is not None
        self.lease = self._lease(head.seq + 1, head.renewal_sequence + 1, token, owner)
        return Acquired(lease=self.lease)

    def _begin(self, owner: LeaderLeaseOwner) -> LeaseOutcome:
        if self.lease is None:
            self.lease = self._lease(1, 1, 1, owner)
            return Acquired(lease=self.lease)
        if self.lease.owner != owner:
            return Held(lease=self.lease)
        return self._next(owner, self.lease.token + 1)

    def _renew(self, owner: LeaderLeaseOwner, token: int) -> LeaseOutcome:
        if self.lease is None or self.lease.owner != owner or self.lease.token != token:
            raise Fenced("leader lease renewal was superseded")
        return self._next(owner, token)

    def _takeover(
        self, owner: LeaderLeaseOwner, observation: LeaderLeaseObservation
    ) -> LeaseOutcome:
        if self.clock.monotonic() - observation.started_s < self.ttl_s:
            return Held(lease=observation.lease)
        if self.lease is None:
            raise CorruptRecord("observed leader lease disappeared")
        if self.lease.liveness_identity() != observation.lease.liveness_identity():
            return Held(lease=self.lease)
        return self._next(owner, self.lease.token + 1)


@dataclass
class Run:
    """One manager running in a TaskGroup, with its candidacy and shutdown."""

    clock: SimClock
    manager: LeaderLeaseManager
    task: asyncio.Task[None]
    candidacy: CandidacyWatch = field(default_factory=CandidacyWatch)
    shutdown: asyncio.Event = field(default_factory=asyncio.Event)
    stores: tuple[TrackedStore, ...] = ()

    async def drive(self, seconds: float) -> None:
        await drive(self.clock, seconds, stores=self.stores)

    def lease(self) -> LeaderLease | None:
        return self.manager.lease_watch.current()


@asynccontextmanager
async def running(
    clock: SimClock,
    authority: LeaderLeaseAuthority,
    *stores: TrackedStore,
    manager_owner: LeaderLeaseOwner | None = None,
) -> AsyncIterator[Run]:
    """A manager running in a TaskGroup; on exit it is shut down and awaited."""
    manager = LeaderLeaseManager(authority, manager_owner or owner(1), CONFIG, clock)
    candidacy, shutdown = CandidacyWatch(), asyncio.Event()
    async with asyncio.TaskGroup() as group:
        task = group.create_task(manager.run(candidacy, shutdown))
        run = Run(clock, manager, task, candidacy, shutdown, stores)
        try:
            yield run
        finally:
            shutdown.set()
            await settle(stores)


def fake_case(body: Callable[[SimClock, FakeAuthority], Awaitable[None]]) -> None:
    """Run `body` with a fresh simulated clock and fake authority."""

    async def main() -> None:
        clock = SimClock()
        await body(clock, FakeAuthority(clock, TTL))

    asyncio.run(main())


def real_authority(store: ObjectStore, clock: SimClock) -> tuple[LeaderLeaseStore, TrackedStore]:
    """The real LeaderLeaseStore over `store`, its requests tracked for `drive`."""
    tracked = TrackedStore(store)
    return LeaderLeaseStore(tracked, clock=clock, ttl_s=TTL), tracked
