"""The one seam for time and randomness.

Monotonic time (seconds, float) decides every validity question: lease expiry, deadlines,
backoff. Wall time (milliseconds since the epoch) is for diagnostics only. Randomness (jitter,
nonces, boot ids) comes from the clock too, so a simulation seeded once replays exactly.

Deadlines are absolute `monotonic()` values: asyncio has no ambient deadline, so callers pass
`deadline` down and wrap awaits in `clock.timeout_at(deadline)`.
"""

from __future__ import annotations

import abc
import random
import uuid
from contextlib import AbstractAsyncContextManager


class Clock(abc.ABC):
    """Time and randomness for one process (or one simulated node)."""

    @abc.abstractmethod
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""

    @abc.abstractmethod
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch. Diagnostic only: never decides validity."""

    @abc.abstractmethod
    async def sleep(self, seconds: float) -> None:
        """Sleep for `seconds` of monotonic time (0 or less yields once)."""

    @abc.abstractmethod
    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        """Raise TimeoutError in the block once monotonic() reaches `deadline`."""

    @property
    @abc.abstractmethod
    def random(self) -> random.Random:
        """The random source for jitter and choices."""

    def uuid4(self) -> uuid.UUID:
        """A random (version 4) UUID from this clock's random source."""
        return uuid.UUID(int=self.random.getrandbits(128), version=4)

    def uuid7(self) -> uuid.UUID:
        """A time-ordered (version 7, RFC 9562) UUID: 48 bits of wall milliseconds, then random."""
        unix_ms = self.wall_ms() & ((1 << 48) - 1)
        rand_a = self.random.getrandbits(12)
        rand_b = self.random.getrandbits(62)
        value = (unix_ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
        return uuid.UUID(int=value)

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until monotonic() reaches `deadline`."""
        await self.sleep(deadline - self.monotonic())


def seeded_random(seed: int) -> random.Random:
    """A deterministic random source for fault injection and simulations."""
    return random.Random(seed)
