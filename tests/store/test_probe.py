"""The contract probe fails stores that lack a property the control plane needs (SC §4.2;
scenarios SC-T30 .. SC-T34)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from laminar_cluster.clock import RealClock, retry_until
from laminar_cluster.errors import InvalidArgument, ObjectNotFound, StoreUnavailable
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult
from laminar_cluster.store.api import OVERWRITE
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from laminar_cluster.store.probe import (
    CHECKS,
    PROBE_PREFIX,
    StoreContractInconclusive,
    StoreContractViolated,
    probe_store_contract,
    verify_store_contract,
)


class Delegating(ObjectStore):
    def __init__(self) -> None:
        self.inner = ObstoreStore.memory()

    @property
    def url(self) -> str:
        return f"test+{type(self).__name__}://"

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        return await self.inner.head(key)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self.inner.put(key, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)


class IgnoresConditions(Delegating):
    """Treats every write as an overwrite: silently lacks create-only and CAS."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self.inner.put(key, body, OVERWRITE)


class AcceptsStaleUpdates(Delegating):
    """Honours create-only but applies any update regardless of its version."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        if isinstance(mode, PutMode.__args__[2]):  # type: ignore[attr-defined]
            return await self.inner.put(key, body, OVERWRITE)
        return await self.inner.put(key, body, mode)


class NoVersions(Delegating):
    """Reads carry neither e_tag nor version."""

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        got = await self.inner.get(key, end=end)
        meta = dataclasses.replace(got.meta, e_tag=None, version=None)
        return GetResult(meta=meta, body=got.body)


class StaleAfterDelete(Delegating):
    """Keeps serving deleted objects (a stale read after delete)."""

    def __init__(self) -> None:
        super().__init__()
        self.ghosts: dict[str, GetResult] = {}

    async def delete(self, key: str) -> None:
        self.ghosts[key] = await self.inner.get(key)
        await self.inner.delete(key)

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        try:
            return await self.inner.get(key, end=end)
        except ObjectNotFound:
            if key in self.ghosts:
                return self.ghosts[key]
            raise


class NeverAnswers(Delegating):
    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def probe(store: ObjectStore, timeout_s: float = 5.0) -> dict[str, bool]:
    report = asyncio.run(probe_store_contract(store, RealClock(), timeout_s=timeout_s))
    assert [r.name for r in report.results] == list(CHECKS)
    return {r.name: r.ok for r in report.results}


def test_sc_t30_probe_passes_on_cas_store() -> None:
    assert all(probe(Delegating()).values())


def test_sc8_probe_detects_create_overwrite() -> None:
    results = probe(IgnoresConditions())
    assert results["create_exclusive"] is False
    assert not any(results.values()) or results["create_exclusive"] is False


def test_sc8_probe_detects_stale_update_accepted() -> None:
    results = probe(AcceptsStaleUpdates())
    assert results["create_exclusive"] and results["update_if_match"]
    assert results["stale_update_rejected"] is False


def test_sc8_probe_detects_missing_version_metadata() -> None:
    results = probe(NoVersions())
    assert results["create_exclusive"] is True
    assert results["read_metadata"] is False


def test_sc8_a_store_with_stale_reads_after_delete_fails() -> None:
    results = probe(StaleAfterDelete())
    assert results["list_visible"] is True
    assert results["delete_visible"] is False


def test_sc_t34_probe_timeout_on_a_hanging_store() -> None:
    results = probe(NeverAnswers(), timeout_s=0.2)
    assert results["create_exclusive"] is False


def test_sc8_verify_raises_naming_the_failed_checks_and_cleans_up() -> None:
    store = AcceptsStaleUpdates()
    with pytest.raises(StoreContractViolated, match="stale_update_rejected"):
        asyncio.run(verify_store_contract(store, RealClock(), timeout_s=5))
    assert asyncio.run(store.inner.list(PROBE_PREFIX)) == []


def test_verify_passes_silently_on_a_correct_store() -> None:
    store = Delegating()
    asyncio.run(verify_store_contract(store, RealClock(), timeout_s=5))
    assert asyncio.run(store.inner.list(PROBE_PREFIX)) == []


def test_a_zero_probe_timeout_is_invalid() -> None:
    with pytest.raises(InvalidArgument):
        asyncio.run(probe_store_contract(Delegating(), RealClock(), timeout_s=0))


@pytest.mark.parametrize("kind", [FaultKind.BEFORE, FaultKind.AFTER])
def test_a_probe_stopped_by_a_transient_fault_is_inconclusive_and_retried(kind: FaultKind) -> None:
    async def main() -> None:
        clock = RealClock()
        store = FaultyStore(ObstoreStore.memory(), clock=clock, seed=1)
        store.fail_next(kind, op="put", key_prefix=PROBE_PREFIX)
        with pytest.raises(StoreContractInconclusive, match="create_exclusive") as info:
            await verify_store_contract(store, clock, timeout_s=5)
        assert isinstance(info.value, StoreUnavailable)  # what retry_until retries
        assert isinstance(
            info.value, StoreContractViolated
        )  # what callers that refuse the store catch (SC-8)

        store.fail_next(kind, op="put", key_prefix=PROBE_PREFIX)
        attempts = 0

        async def verify() -> None:
            nonlocal attempts
            attempts += 1
            await verify_store_contract(store, clock, timeout_s=5)

        await retry_until(verify, what="probe", clock=clock, deadline=clock.monotonic() + 10)
        assert attempts == 2

    asyncio.run(main())


def test_a_violated_contract_is_not_inconclusive() -> None:
    with pytest.raises(StoreContractViolated) as info:
        asyncio.run(verify_store_contract(AcceptsStaleUpdates(), RealClock(), timeout_s=5))
    assert not isinstance(info.value, StoreUnavailable)
