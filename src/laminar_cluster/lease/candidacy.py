"""Whether this process may contend for leadership (LA §3.10, LA-9).

`LeaderCandidacy` is `{eligible, generation}`: the generation starts at 1 and increments on
every eligible → ineligible transition. A watcher that sees a changed generation knows a grant
was lost, even if coalesced updates show "eligible" again by the time it looks: the lease
manager then drops its token and begins a new term (LA-9: a token is never reused after the
grant was withdrawn).

`CandidacyWatch` is the channel between whoever decides eligibility (membership, an operator)
and the lease manager: `set()` records a transition, `current()` reads the latest value, and
`wait_changed(since)` returns as soon as the value differs from `since`, so a flap that
happened between two looks is still seen through the generation.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from laminar_cluster.checkpoint.limits import U64_MAX


@dataclass(frozen=True, slots=True)
class LeaderCandidacy:
    """Eligibility plus a generation that counts lost grants."""

    eligible: bool
    generation: int

    @classmethod
    def initial(cls, eligible: bool) -> LeaderCandidacy:
        return cls(eligible=eligible, generation=1)

    @classmethod
    def terminal(cls) -> LeaderCandidacy:
        """Ineligible forever: no later transition can follow it."""
        return cls(eligible=False, generation=U64_MAX)

    def transition(self, eligible: bool) -> LeaderCandidacy | None:
        """The candidacy after `eligible` is set; None when the generation would overflow."""
        generation = self.generation
        if self.eligible and not eligible:
            if generation >= U64_MAX:
                return None
            generation += 1
        return LeaderCandidacy(eligible=eligible, generation=generation)


class CandidacyWatch:
    """A single-value watch channel of LeaderCandidacy (the latest value wins)."""

    def __init__(self, eligible: bool = True) -> None:
        self._value = LeaderCandidacy.initial(eligible)
        self._closed = False
        self._changed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed

    def current(self) -> LeaderCandidacy:
        return self._value

    def set(self, eligible: bool) -> LeaderCandidacy:
        """Record a transition and wake waiters; return the new value.

        A generation overflow cannot be represented: the watch then publishes
        `LeaderCandidacy.terminal()` and closes, so the manager fences (fail closed). Setting a
        closed watch changes nothing.
        """
        if self._closed:
            return self._value
        following = self._value.transition(eligible)
        if following is None:
            self._value = LeaderCandidacy.terminal()
            self.close()
            return self._value
        if following != self._value:
            self._value = following
            self._notify()
        return self._value

    def close(self) -> None:
        """The sender is gone: waiters with nothing new to see get None."""
        if not self._closed:
            self._closed = True
            self._notify()

    async def wait_changed(self, since: LeaderCandidacy) -> LeaderCandidacy | None:
        """The current value as soon as it differs from `since`; None once the watch is closed
        and nothing new is left to see."""
        while True:
            changed = self._changed
            if self._value != since:
                return self._value
            if self._closed:
                return None
            await changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
