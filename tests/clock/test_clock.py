"""The simulated clock, the real clock and bounded retries."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.clock import RealClock, SimulatedClock, retry_until
from laminar_cluster.errors import DeadlineExceeded, StoreUnavailable


def test_simulated_sleep_wakes_only_when_time_passes() -> None:
    async def body() -> None:
        clock = SimulatedClock()
        woke: list[float] = []

        async def sleeper(seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append(clock.monotonic())

        async with asyncio.TaskGroup() as group:
            group.create_task(sleeper(2.0))
            group.create_task(sleeper(1.0))
            await clock.step(0.5)
            assert woke == []
            await clock.step(2.0)
        assert woke == [1001.0, 1002.0]
        assert clock.monotonic() == 1002.5

    asyncio.run(body())


def test_simulated_timeout_at_expires_at_the_deadline() -> None:
    async def body() -> None:
        clock = SimulatedClock()
        waiting = asyncio.Event()

        async def blocked() -> str:
            try:
                async with clock.timeout_at(clock.monotonic() + 5):
                    waiting.set()
                    await asyncio.Event().wait()
            except TimeoutError:
                return f"timed out at {clock.monotonic()}"
            return "not reached"

        async with asyncio.TaskGroup() as group:
            task = group.create_task(blocked())
            await waiting.wait()
            await clock.step(4.9)
            assert not task.done()
            await clock.step(0.2)
        assert task.result() == "timed out at 1005.0"

    asyncio.run(body())


def test_simulated_timeout_in_the_past_expires_at_once() -> None:
    async def body() -> None:
        clock = SimulatedClock()
        with pytest.raises(TimeoutError):
            async with clock.timeout_at(clock.monotonic() - 1):
                await asyncio.sleep(1)

    asyncio.run(body())


def test_simulated_randomness_and_uuids_replay_from_the_seed() -> None:
    first, second, other = SimulatedClock(seed=3), SimulatedClock(seed=3), SimulatedClock(seed=4)
    assert [first.uuid4() for _ in range(3)] == [second.uuid4() for _ in range(3)]
    assert first.uuid4() != other.uuid4()
    assert first.uuid4().version == 4


def test_wall_clock_follows_simulated_time() -> None:
    clock = SimulatedClock(wall_start_ms=5_000)

    async def body() -> None:
        clock.advance(1.25)

    asyncio.run(body())
    assert clock.wall_ms() == 6_250


def test_real_clock_timeout_at_uses_monotonic_deadlines() -> None:
    async def body() -> None:
        clock = RealClock()
        with pytest.raises(TimeoutError):
            async with clock.timeout_at(clock.monotonic() + 0.05):
                await clock.sleep(5)

    asyncio.run(body())


def test_retry_until_retries_unavailable_then_succeeds() -> None:
    async def body() -> None:
        clock = RealClock()
        calls = 0

        async def flaky() -> str:
            nonlocal calls
            calls += 1
            if calls < 3:
                raise StoreUnavailable("flaky")
            return "ok"

        result = await retry_until(
            flaky,
            what="flaky read",
            clock=clock,
            deadline=clock.monotonic() + 5,
            backoff_s_min=0.001,
            backoff_s_max=0.002,
        )
        assert (result, calls) == ("ok", 3)

    asyncio.run(body())


def test_retry_until_is_bounded_by_attempts() -> None:
    async def body() -> None:
        clock = RealClock()
        calls = 0

        async def down() -> None:
            nonlocal calls
            calls += 1
            raise StoreUnavailable("down")

        with pytest.raises(DeadlineExceeded, match="gave up after 4 attempts"):
            await retry_until(
                down,
                what="read",
                clock=clock,
                deadline=clock.monotonic() + 60,
                attempts_max=4,
                backoff_s_min=0.001,
                backoff_s_max=0.001,
            )
        assert calls == 4

    asyncio.run(body())


def test_retry_until_never_sleeps_past_the_deadline() -> None:
    async def body() -> None:
        clock = SimulatedClock()

        async def down() -> None:
            raise StoreUnavailable("down")

        with pytest.raises(DeadlineExceeded):
            await retry_until(
                down,
                what="read",
                clock=clock,
                deadline=clock.monotonic() + 0.01,
                attempts_max=1000,
                backoff_s_min=1.0,
                backoff_s_max=1.0,
            )
        assert clock.monotonic() == 1000.0  # gave up instead of sleeping past the deadline

    asyncio.run(body())


def test_retry_until_does_not_retry_other_errors() -> None:
    async def body() -> None:
        clock = RealClock()

        async def broken() -> None:
            raise ValueError("bug")

        with pytest.raises(ValueError):
            await retry_until(broken, what="x", clock=clock, deadline=clock.monotonic() + 5)

    asyncio.run(body())


def test_retry_until_raises_deadline_exceeded_on_a_hung_operation() -> None:
    async def body() -> None:
        clock = RealClock()

        async def hang() -> None:
            await asyncio.Event().wait()

        with pytest.raises(DeadlineExceeded, match="deadline passed in attempt 1"):
            await retry_until(hang, what="hang", clock=clock, deadline=clock.monotonic() + 0.05)

    asyncio.run(body())


def test_simulated_timeout_left_early_is_not_touched_by_a_later_advance() -> None:
    async def body() -> None:
        clock = SimulatedClock()
        async with clock.timeout_at(clock.monotonic() + 5):
            pass
        clock.advance(10)  # must not try to expire the finished block
        assert clock.monotonic() == 1010.0

    asyncio.run(body())
