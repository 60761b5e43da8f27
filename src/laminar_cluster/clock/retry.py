"""Bounded retries with absolute deadlines (kazoo's KazooRetry, trio's deadlines)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from laminar_cluster.clock.api import Clock
from laminar_cluster.errors import DeadlineExceeded, StoreUnavailable

T = TypeVar("T")


async def retry_until(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    clock: Clock,
    deadline: float,
    attempts_max: int = 8,
    backoff_s_min: float = 0.05,
    backoff_s_max: float = 2.0,
) -> T:
    """Retry only StoreUnavailable, at most attempts_max calls, never sleeping past deadline."""
    assert attempts_max >= 1
    assert 0 < backoff_s_min <= backoff_s_max
    backoff_s = backoff_s_min
    last_error: StoreUnavailable | None = None
    attempt = 0
    for attempt in range(1, attempts_max + 1):
        if clock.monotonic() >= deadline:
            break
        try:
            async with clock.timeout_at(deadline):
                return await operation()
        except StoreUnavailable as error:
            last_error = error
        except TimeoutError as error:
            raise DeadlineExceeded(f"{what}: deadline passed in attempt {attempt}") from error
        sleep_s = clock.random.uniform(0, backoff_s)  # full jitter
        if attempt == attempts_max or clock.monotonic() + sleep_s >= deadline:
            break
        await clock.sleep(sleep_s)
        backoff_s = min(backoff_s * 2, backoff_s_max)
    raise DeadlineExceeded(
        f"{what}: gave up after {attempt} attempts: {last_error}"
    ) from last_error
