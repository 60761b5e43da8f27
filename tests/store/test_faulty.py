"""Every injected fault kind does what it names, deterministically from the seed."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, OVERWRITE, ReadBack, put_resolved
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from laminar_cluster.store.obstore_backend import ObstoreStore


def make(config: FaultConfig | None = None, seed: int = 7) -> tuple[FaultyStore, SimulatedClock]:
    clock = SimulatedClock(seed=seed)
    return FaultyStore(ObstoreStore.memory(), clock=clock, seed=seed, config=config), clock


def test_error_before_leaves_nothing_applied() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.BEFORE, op="put")
        with pytest.raises(StoreUnavailable):
            await store.put("k", b"v", CREATE)
        with pytest.raises(ObjectNotFound):
            await store.inner.get("k")
        store.fail_next(FaultKind.BEFORE, op="get")
        await store.inner.put("k", b"v", CREATE)
        with pytest.raises(StoreUnavailable):
            await store.get("k")
        assert store.stats.injected[FaultKind.BEFORE] == 2

    asyncio.run(body())


def test_error_after_applies_the_write_and_loses_the_response() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.AFTER, op="put")
        with pytest.raises(WriteOutcomeUnknown):
            await store.put("k", b"v", CREATE)
        assert (await store.inner.get("k")).body == b"v"
        store.fail_next(FaultKind.AFTER, op="delete")
        with pytest.raises(WriteOutcomeUnknown):
            await store.delete("k")
        with pytest.raises(ObjectNotFound):
            await store.inner.get("k")

    asyncio.run(body())


def test_sc7_conflict_after_apply_is_settled_as_ours_by_read_back() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.AFTER_AS_CONFLICT, op="put")
        with pytest.raises(ObjectAlreadyExists):
            await store.put("k", b"mine-1", CREATE)
        store.fail_next(FaultKind.AFTER_AS_CONFLICT, op="put")
        token = (await store.get("k")).meta.token
        resolution = await put_resolved(store, "k", b"mine-2", token)
        assert resolution.state is ReadBack.OURS
        assert (await store.inner.get("k")).body == b"mine-2"

    asyncio.run(body())


def test_update_conflict_after_apply_raises_precondition_failed() -> None:
    async def body() -> None:
        store, _ = make()
        await store.put("k", b"one", CREATE)
        token = (await store.get("k")).meta.token
        store.fail_next(FaultKind.AFTER_AS_CONFLICT, op="put")
        with pytest.raises(PreconditionFailed):
            await store.put("k", b"two", token)
        assert (await store.inner.get("k")).body == b"two"

    asyncio.run(body())


def test_sc7_phantom_conflict_writes_nothing_and_reads_back_absent() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.PHANTOM_CONFLICT, op="put")
        resolution = await put_resolved(store, "k", b"mine", CREATE)
        assert resolution.state is ReadBack.ABSENT
        with pytest.raises(ObjectNotFound):
            await store.inner.get("k")
        assert store.stats.injected[FaultKind.PHANTOM_CONFLICT] == 1

    asyncio.run(body())


def test_sc7_lost_response_is_settled_by_put_resolved() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.AFTER, op="put")
        resolution = await put_resolved(store, "k", b"mine", CREATE)
        assert resolution.state is ReadBack.OURS and resolution.put_result is None

    asyncio.run(body())


def test_latency_sleeps_on_the_clock() -> None:
    async def body() -> None:
        store, clock = make(FaultConfig(latency_s_min=0.5, latency_s_max=0.5))
        write = asyncio.ensure_future(store.put("k", b"v", CREATE))
        await asyncio.sleep(0)
        assert not write.done()
        clock.advance(0.4)
        await asyncio.sleep(0)
        assert not write.done()
        clock.advance(0.2)
        await write
        assert (await store.inner.get("k")).body == b"v"

    asyncio.run(body())


def test_outage_window_fails_every_request_inside_it_only() -> None:
    async def body() -> None:
        store, clock = make(FaultConfig(outages=((1010.0, 1020.0),)))
        await store.put("k", b"v", OVERWRITE)  # t=1000: before the window
        clock.advance(10)
        for op in (store.get("k"), store.put("k", b"w", OVERWRITE), store.list("")):
            with pytest.raises(StoreUnavailable):
                await op
        clock.advance(10)  # t=1020: after the window
        assert (await store.get("k")).body == b"v"

    asyncio.run(body())


def test_rates_are_deterministic_from_the_seed() -> None:
    async def trace(seed: int) -> list[str]:
        config = FaultConfig(error_before_rate=0.2, error_after_rate=0.2, conflict_after_rate=0.1)
        store, _ = make(config, seed=seed)
        outcomes = []
        for index in range(200):
            try:
                await store.put(f"k/{index}", b"v", CREATE)
                outcomes.append("ok")
            except Exception as error:
                outcomes.append(type(error).__name__)
        return outcomes

    first, again, other = (asyncio.run(trace(seed)) for seed in (1, 1, 2))
    assert first == again
    assert first != other
    kinds = set(first)
    assert {"ok", "StoreUnavailable", "WriteOutcomeUnknown", "ObjectAlreadyExists"} <= kinds


def test_scripted_faults_match_operation_and_key_prefix() -> None:
    async def body() -> None:
        store, _ = make()
        store.fail_next(FaultKind.BEFORE, op="put", key_prefix="b/")
        await store.put("a/1", b"v", CREATE)  # not matched
        with pytest.raises(StoreUnavailable):
            await store.put("b/1", b"v", CREATE)
        await store.put("b/1", b"v", CREATE)  # consumed once

    asyncio.run(body())


def test_invalid_configuration_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        FaultConfig(error_before_rate=1.5)
    with pytest.raises(InvalidArgument):
        FaultConfig(latency_s_min=2, latency_s_max=1)
    store, _ = make()
    with pytest.raises(InvalidArgument):
        store.fail_next(FaultKind.AFTER, op="get")
