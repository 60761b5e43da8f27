"""ReadRetryingStore: reads failed by StoreUnavailable are tried again, at most attempts_max
times; writes are never repeated; the caller's deadline still binds."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import InvalidArgument, ObjectNotFound, StoreUnavailable
from laminar_cluster.store import CREATE
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from laminar_cluster.store.read_retry import ReadRetryingStore


def make(config: FaultConfig | None = None) -> tuple[ReadRetryingStore, FaultyStore]:
    clock = RealClock()
    faulty = FaultyStore(ObstoreStore.memory(), clock=clock, seed=3, config=config)
    return ReadRetryingStore(faulty, clock, backoff_s_min=0.001, backoff_s_max=0.004), faulty


@pytest.mark.parametrize("op", ["get", "head", "list"])
def test_a_read_failed_twice_is_answered_by_its_third_try(op: str) -> None:
    async def main() -> None:
        store, faulty = make()
        await faulty.inner.put("a/k", b"v", CREATE)
        for _ in range(2):
            faulty.fail_next(FaultKind.BEFORE, op=op)
        if op == "get":
            assert (await store.get("a/k")).body == b"v"
        elif op == "head":
            assert (await store.head("a/k")).size == 1
        else:
            assert [meta.key for meta in await store.list("a/")] == ["a/k"]
        assert faulty.stats.injected[FaultKind.BEFORE] == 2
        assert store.retried == 2

    asyncio.run(main())


def test_a_read_failing_every_try_raises_after_attempts_max() -> None:
    async def main() -> None:
        store, faulty = make()
        await faulty.inner.put("k", b"v", CREATE)
        for _ in range(5):
            faulty.fail_next(FaultKind.BEFORE, op="get")
        with pytest.raises(StoreUnavailable):
            await store.get("k")
        assert faulty.stats.injected[FaultKind.BEFORE] == store.attempts_max == 3
        assert (await store.get("k")).body == b"v"  # two scripted faults were left: 2 retries

    asyncio.run(main())


def test_definite_answers_are_not_retried() -> None:
    async def main() -> None:
        store, _ = make()
        with pytest.raises(ObjectNotFound):
            await store.get("missing")
        assert store.retried == 0

    asyncio.run(main())


def test_writes_are_never_repeated() -> None:
    async def main() -> None:
        store, faulty = make()
        faulty.fail_next(FaultKind.BEFORE, op="put")
        with pytest.raises(StoreUnavailable):
            await store.put("k", b"v", CREATE)
        with pytest.raises(ObjectNotFound):
            await faulty.inner.get("k")  # nothing applied, and nothing tried again
        assert store.retried == 0

    asyncio.run(main())


def test_the_callers_deadline_ends_the_retries() -> None:
    async def main() -> None:
        clock = RealClock()
        faulty = FaultyStore(
            ObstoreStore.memory(), clock=clock, seed=4, config=FaultConfig(error_before_rate=1.0)
        )
        store = ReadRetryingStore(
            faulty, clock, attempts_max=1_000, backoff_s_min=0.05, backoff_s_max=0.05
        )
        with pytest.raises(TimeoutError):
            async with clock.timeout_at(clock.monotonic() + 0.2):
                await store.get("k")
        assert 1 <= faulty.stats.injected[FaultKind.BEFORE] < 1_000

    asyncio.run(main())


def test_bounds_are_checked() -> None:
    with pytest.raises(InvalidArgument):
        ReadRetryingStore(ObstoreStore.memory(), RealClock(), attempts_max=0)
    with pytest.raises(InvalidArgument):
        ReadRetryingStore(ObstoreStore.memory(), RealClock(), backoff_s_min=0.2, backoff_s_max=0.1)
