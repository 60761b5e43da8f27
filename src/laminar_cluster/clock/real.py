"""The production clock: time.monotonic, time.time_ns and the OS random source."""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import AbstractAsyncContextManager

from laminar_cluster.clock.api import Clock


class RealClock(Clock):
    """Real time. `random` is seeded from the OS (SystemRandom for nonces and boot ids)."""

    def __init__(self) -> None:
        self._random = random.SystemRandom()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def timeout_at(self, deadline: float) -> AbstractAsyncContextManager[object]:
        loop = asyncio.get_running_loop()
        # asyncio's deadline is on loop.time(); translate from our monotonic clock.
        return asyncio.timeout_at(loop.time() + (deadline - time.monotonic()))

    @property
    def random(self) -> random.Random:
        return self._random
