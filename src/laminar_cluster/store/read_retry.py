"""`ReadRetryingStore`: reads that failed with `StoreUnavailable` are sent again, a few times.

A read has no effects, so repeating it is always safe (STYLE "Bounded retries": retry only reads,
or writes read back first). Writes pass through untouched: a put or delete that fails is the
caller's to settle (`store.readback`), never repeated blindly here.

Each read is tried at most `attempts_max` times, sleeping a full-jitter backoff through the clock
between tries (from `backoff_s_min`, doubling, at most `backoff_s_max`). The caller's deadline
still binds: its `timeout_at` cancels a sleep or a try like any other await. The last
StoreUnavailable is raised unchanged when every try failed.

Why: a node's control plane and checkpoints are chains of dozens to hundreds of reads, each
failing the whole step on its first StoreUnavailable. At 1% failed reads a chain of 200 reads
succeeds 13% of the time; with three tries per read, more than 99.9% (the faulty-store chaos
run stalled for want of a committed checkpoint, issue 7).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from laminar_cluster.clock import Clock
from laminar_cluster.errors import InvalidArgument, StoreUnavailable
from laminar_cluster.store.api import GetResult, ObjectMeta, ObjectStore
from laminar_cluster.store.forwarding import ForwardingStore

T = TypeVar("T")

READ_ATTEMPTS_MAX_DEFAULT: Final = 3
READ_BACKOFF_S_MIN_DEFAULT: Final = 0.01
READ_BACKOFF_S_MAX_DEFAULT: Final = 0.1


class ReadRetryingStore(ForwardingStore):
    """Wraps `inner`; `get`, `head` and `list` are retried on StoreUnavailable."""

    def __init__(
        self,
        inner: ObjectStore,
        clock: Clock,
        *,
        attempts_max: int = READ_ATTEMPTS_MAX_DEFAULT,
        backoff_s_min: float = READ_BACKOFF_S_MIN_DEFAULT,
        backoff_s_max: float = READ_BACKOFF_S_MAX_DEFAULT,
    ) -> None:
        if attempts_max < 1:
            raise InvalidArgument(f"read retries: attempts_max must be >= 1, not {attempts_max}")
        if not 0 < backoff_s_min <= backoff_s_max:
            raise InvalidArgument(
                f"read retries: backoff bounds must satisfy 0 < {backoff_s_min} <= {backoff_s_max}"
            )
        super().__init__(inner)
        self.clock = clock
        self.attempts_max = attempts_max
        self.backoff_s_min = backoff_s_min
        self.backoff_s_max = backoff_s_max
        self.retried = 0  # reads sent again after a StoreUnavailable

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self._read(lambda: self.inner.get(key, end=end))

    async def head(self, key: str) -> ObjectMeta:
        return await self._read(lambda: self.inner.head(key))

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        return await self._read(lambda: self.inner.get_if_changed(key, e_tag))

    async def get_range(self, key: str, start: int, end: int) -> GetResult:
        return await self._read(lambda: self.inner.get_range(key, start, end))

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self._read(lambda: self.inner.list(prefix, offset=offset, limit=limit))

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T:
        backoff_s = self.backoff_s_min
        for attempt in range(1, self.attempts_max + 1):
            try:
                return await read()
            except StoreUnavailable:
                if attempt == self.attempts_max:
                    raise
            self.retried += 1
            await self.clock.sleep(self.clock.random.uniform(0, backoff_s))  # full jitter
            backoff_s = min(backoff_s * 2, self.backoff_s_max)
        raise AssertionError("unreachable: the last attempt returns or raises")
