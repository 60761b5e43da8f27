"""The process-local monotonic gate of a leader grant (LA §4.9.2, LA §8.3).

`LeaseDeadline` says whether this process may act as leader *now*, judged only on the
injected Clock's monotonic time (LA §6: wall clocks never decide validity). The lease manager
extends it after each successful renewal to the instant anchored at the *start* of that
attempt (LA-8), withdraws it on candidacy loss or a rival's hold, and fences it terminally on
shutdown, a missed renewal, a late response or durable fencing. Hot paths read `is_live()`
(together with the exact proof, `lease_grants_proof`).

Two rules are easy to lose and are kept here:

* an already-passed deadline is never resurrected: extending a grant whose deadline has
  passed terminalises it instead (LA-8: a grant that lapsed may have been taken over);
* `withdraw()` is not terminal (the manager may contend again, always with a new token, LA-9),
  `fence()` is.

Waiters of `wait_until_expired()` and `wait_changed()` wake on every transition through an
asyncio.Event that is replaced on each change. `LeaseWatch` is the other half of the local
grant: the lease the manager published (None unless it holds a grant).
"""

from __future__ import annotations

import asyncio
import math

from laminar_cluster.clock import Clock
from laminar_cluster.lease.records import LeaderLease


class LeaseDeadline:
    """A monotonic validity instant (None = not live) plus a terminal flag."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._origin = clock.monotonic()
        self._valid_until: float | None = None
        self._terminal = False
        self._changed = asyncio.Event()

    @classmethod
    def fenced(cls, clock: Clock) -> LeaseDeadline:
        """An irreversibly fenced deadline."""
        deadline = cls(clock)
        deadline.fence()
        return deadline

    @classmethod
    def live_for(cls, clock: Clock, remaining_s: float) -> LeaseDeadline:
        """A deadline live for `remaining_s` from now."""
        deadline = cls(clock)
        deadline.extend(remaining_s)
        return deadline

    @property
    def valid_until(self) -> float | None:
        """The monotonic instant the grant ends, or None when not holding."""
        return self._valid_until

    @property
    def terminal(self) -> bool:
        """Whether this deadline is fenced forever."""
        return self._terminal

    def is_live(self) -> bool:
        """Not terminal, holding, and monotonic now strictly before the validity instant."""
        if self._terminal or self._valid_until is None:
            return False
        return self._clock.monotonic() < self._valid_until

    def extend(self, remaining_s: float) -> None:
        """Extend to `remaining_s` from now (same rules as `extend_until`)."""
        self.extend_until(self._clock.monotonic() + remaining_s)

    def extend_until(self, valid_until: float) -> None:
        """Set the validity instant to `valid_until`.

        An instant not after this deadline's creation (or not a number) fences. If the current
        grant exists and has already passed, the call terminalises instead of extending: a
        naturally expired grant is never resurrected (LA-8).
        """
        if math.isnan(valid_until) or valid_until <= self._origin:
            self.fence()
            return
        if self._terminal:
            return
        current = self._valid_until
        if current is not None and self._clock.monotonic() >= current:
            self._terminalise()
            return
        self._valid_until = valid_until
        self._notify()

    def withdraw(self) -> None:
        """Give up the grant without terminalising: the manager may acquire again later."""
        if self._terminal:
            return
        self._valid_until = None
        self._notify()

    def fence(self) -> None:
        """Revoke the grant forever and wake every waiter."""
        self._terminalise()

    async def wait_changed(self) -> None:
        """Return at the next transition (extend, withdraw, fence, natural expiry seen)."""
        await self._changed.wait()

    async def wait_until_expired(self) -> None:
        """Return once the grant is not live: natural expiry (which terminalises), a fence, or
        no grant held at all."""
        while True:
            changed = self._changed
            if self._terminal or self._valid_until is None:
                return
            valid_until = self._valid_until
            if self._clock.monotonic() >= valid_until:
                self._terminalise()
                return
            try:
                async with self._clock.timeout_at(valid_until):
                    await changed.wait()
            except TimeoutError:
                pass  # the instant passed: re-check (a renewal may have moved it)

    def _terminalise(self) -> None:
        self._terminal = True
        self._valid_until = None
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def __repr__(self) -> str:
        return f"LeaseDeadline(terminal={self._terminal}, live={self.is_live()})"


class LeaseWatch:
    """The locally authorised lease: a lease only while the manager holds a grant, else None."""

    def __init__(self) -> None:
        self._value: LeaderLease | None = None
        self._version = 0
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        """Counts publications that changed the value."""
        return self._version

    def current(self) -> LeaderLease | None:
        return self._value

    async def wait_changed(self, since_version: int | None = None) -> LeaderLease | None:
        """The value after the next change (or after `since_version`, if already past it)."""
        since = self._version if since_version is None else since_version
        while self._version == since:
            await self._changed.wait()
        return self._value

    def publish(self, lease: LeaderLease | None) -> None:
        """Set the value (the lease manager is the only publisher); wakes waiters on a change."""
        if lease == self._value:
            return
        self._value = lease
        self._version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
