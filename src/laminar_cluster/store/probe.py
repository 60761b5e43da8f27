"""The store contract probe (SC §4.2, `verify_store_contract`).

The leader authority must refuse to run on a store that lacks atomic create, native
compare-and-swap or read-after-delete: such a store would let two leaders fork the log. The probe
writes one object under `control/object-store-contract-probes/v1/<uuid>.probe` and checks:

1. `create_exclusive`: a second create of the same key fails with already-exists/precondition.
2. `read_metadata`: a read returns the exact bytes and size, with an e_tag or a version.
3. `update_if_match`: an update naming the current version succeeds and changes the version.
4. `stale_update_rejected`: an update naming the old version fails with precondition failed
   and leaves body and version unchanged.
5. `list_visible`: a listing of the probe prefix shows the object with its size.
6. `delete_visible`: after a delete, a read finds nothing.

A store that silently ignores conditions fails 1 and 4. Each check runs under the deadline; the
cleanup (delete) is always attempted, under its own deadline.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.errors import (
    DeadlineExceeded,
    InvalidArgument,
    LaminarError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store.api import CREATE, ObjectMeta, ObjectStore

PROBE_PREFIX: Final = "control/object-store-contract-probes/v1/"
PAYLOAD_V1: Final = b"laminardb-control-store-contract-v1"
PAYLOAD_V2: Final = b"laminardb-control-store-contract-v2"
PAYLOAD_STALE: Final = b"laminardb-control-store-contract-stale"

CHECKS: Final = (
    "create_exclusive",
    "read_metadata",
    "update_if_match",
    "stale_update_rejected",
    "list_visible",
    "delete_visible",
)


class StoreContractViolated(LaminarError):
    """The store lacks a property the control plane needs; do not run on it."""


class StoreContractInconclusive(StoreContractViolated, StoreUnavailable):
    """The probe did not finish: a request failed without an answer about the contract (the
    store was unavailable, a response was lost, a check timed out). Nothing is known to be
    wrong with the store: retry the probe within the caller's deadline."""


NOT_REACHED: Final = "not reached"


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    # Failed without an answer about the contract (unavailable, lost response, timeout).
    transient: bool = False


@dataclass
class ProbeReport:
    store_url: str
    key: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.results) == len(CHECKS) and all(result.ok for result in self.results)

    def failures(self) -> list[CheckResult]:
        return [result for result in self.results if not result.ok]

    @property
    def inconclusive(self) -> bool:
        """Failed only for want of answers: a transient failure, and no other failure than
        checks not reached."""
        failures = self.failures()
        return any(result.transient for result in failures) and all(
            result.transient or result.detail == NOT_REACHED for result in failures
        )


class _CheckFailed(Exception):
    pass


async def probe_store_contract(
    store: ObjectStore, clock: Clock, *, timeout_s: float
) -> ProbeReport:
    """Run every check and report each; never raises for a failed check."""
    if not timeout_s > 0:
        raise InvalidArgument(f"store contract probe timeout must be > 0 s, not {timeout_s}")
    report = ProbeReport(store_url=store.url, key=f"{PROBE_PREFIX}{clock.uuid4()}.probe")
    deadline = clock.monotonic() + timeout_s
    try:
        async with clock.timeout_at(deadline):
            await _run_checks(store, report)
    except TimeoutError:
        _record(report, _next_check(report), False, f"probe exceeded {timeout_s} s", True)
    cleanup_deadline = clock.monotonic() + timeout_s
    try:
        async with clock.timeout_at(cleanup_deadline):
            await _check_delete(store, report)
    except TimeoutError:
        _record(report, "delete_visible", False, f"cleanup exceeded {timeout_s} s", True)
    for name in CHECKS:
        _record(report, name, False, NOT_REACHED)  # no-op for checks already recorded
    report.results.sort(key=lambda result: CHECKS.index(result.name))
    return report


async def verify_store_contract(store: ObjectStore, clock: Clock, *, timeout_s: float) -> None:
    """Raise StoreContractViolated naming every failed check (StoreContractInconclusive, also
    a StoreUnavailable, when only transient failures stopped it); return if all pass."""
    try:
        report = await probe_store_contract(store, clock, timeout_s=timeout_s)
    except DeadlineExceeded as error:
        raise StoreContractViolated(f"{store.url}: contract probe: {error}") from error
    if not report.ok:
        failed = "; ".join(f"{result.name}: {result.detail}" for result in report.failures())
        if report.inconclusive:
            raise StoreContractInconclusive(f"{store.url}: store contract probe failed: {failed}")
        raise StoreContractViolated(f"{store.url}: store contract violated: {failed}")


def _record(report: ProbeReport, name: str, ok: bool, detail: str, transient: bool = False) -> None:
    if name in {result.name for result in report.results}:
        return
    report.results.append(CheckResult(name, ok, detail, transient))


def _transient(error: LaminarError) -> bool:
    return isinstance(error, StoreUnavailable | WriteOutcomeUnknown)


def _next_check(report: ProbeReport) -> str:
    return CHECKS[min(len(report.results), len(CHECKS) - 1)]


async def _run_checks(store: ObjectStore, report: ProbeReport) -> None:
    checks = (_check_create, _check_read, _check_update, _check_stale, _check_list)
    state: dict[str, ObjectMeta] = {}
    for name, check in zip(CHECKS, checks, strict=False):
        try:
            detail = await check(store, report.key, state)
        except _CheckFailed as failure:
            _record(report, name, False, str(failure))
            return  # later checks build on this one
        except LaminarError as error:
            _record(report, name, False, f"{type(error).__name__}: {error}", _transient(error))
            return
        _record(report, name, True, detail)


async def _check_create(store: ObjectStore, key: str, state: dict[str, ObjectMeta]) -> str:
    await store.put(key, PAYLOAD_V1, CREATE)
    try:
        await store.put(key, PAYLOAD_STALE, CREATE)
    except (ObjectAlreadyExists, PreconditionFailed):
        return "a second create of the same key was refused"
    raise _CheckFailed("a second create overwrote an existing object")


async def _check_read(store: ObjectStore, key: str, state: dict[str, ObjectMeta]) -> str:
    got = await store.get(key)
    if got.body != PAYLOAD_V1 or got.meta.size != len(PAYLOAD_V1):
        raise _CheckFailed(f"read {got.meta.size} bytes {got.body[:64]!r}; expected {PAYLOAD_V1!r}")
    if got.meta.e_tag is None and got.meta.version is None:
        raise _CheckFailed("a read returned neither an e_tag nor a version")
    state["v1"] = got.meta
    return f"e_tag={got.meta.e_tag} version={got.meta.version}"


async def _check_update(store: ObjectStore, key: str, state: dict[str, ObjectMeta]) -> str:
    v1 = state["v1"]
    await store.put(key, PAYLOAD_V2, v1.token)
    got = await store.get(key)
    if got.body != PAYLOAD_V2:
        raise _CheckFailed(
            f"after an update the body is {got.body[:64]!r}; expected {PAYLOAD_V2!r}"
        )
    if (got.meta.e_tag, got.meta.version) == (v1.e_tag, v1.version):
        raise _CheckFailed("an update did not change the e_tag or version")
    state["v2"] = got.meta
    return "an update naming the current version succeeded and changed it"


async def _check_stale(store: ObjectStore, key: str, state: dict[str, ObjectMeta]) -> str:
    v1, v2 = state["v1"], state["v2"]
    try:
        await store.put(key, PAYLOAD_STALE, v1.token)
    except PreconditionFailed:
        pass
    else:
        raise _CheckFailed("the store accepted an update naming a stale version")
    got = await store.get(key)
    if got.body != PAYLOAD_V2 or (got.meta.e_tag, got.meta.version) != (v2.e_tag, v2.version):
        raise _CheckFailed("a refused stale update changed the object")
    return "an update naming a stale version was refused and changed nothing"


async def _check_list(store: ObjectStore, key: str, state: dict[str, ObjectMeta]) -> str:
    listed = {meta.key: meta for meta in await store.list(PROBE_PREFIX)}
    meta = listed.get(key)
    if meta is None:
        raise _CheckFailed(f"a listing of {PROBE_PREFIX} does not show {key}")
    if meta.size != len(PAYLOAD_V2):
        raise _CheckFailed(f"listing shows {meta.size} bytes; expected {len(PAYLOAD_V2)}")
    return f"listed with size {meta.size} among {len(listed)} probe objects"


async def _check_delete(store: ObjectStore, report: ProbeReport) -> None:
    try:
        await store.delete(report.key)
        with contextlib.suppress(ObjectNotFound):
            await store.get(report.key)
            _record(report, "delete_visible", False, "the probe is still readable after delete")
            return
    except LaminarError as error:
        detail = f"{type(error).__name__}: {error}"
        _record(report, "delete_visible", False, detail, _transient(error))
        return
    if len(report.results) < len(CHECKS) - 1:
        return  # an earlier check failed; delete_visible is reported as not reached
    _record(report, "delete_visible", True, "a read after delete finds nothing")
