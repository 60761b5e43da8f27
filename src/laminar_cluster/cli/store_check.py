"""`laminar-cluster store-check --store URL`: run the store contract probe and print each
property. A store whose first request fails (`store.diagnose`: no such bucket, no credentials,
plain http, unreachable, a path under a regular file) fails the first check with that one line
and the others are not reached; exit 1 when any check fails."""

from __future__ import annotations

from laminar_cluster.clock import RealClock
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.diagnose import diagnose
from laminar_cluster.store.probe import (
    CHECKS,
    NOT_REACHED,
    CheckResult,
    ProbeReport,
    probe_store_contract,
)
from laminar_cluster.views.output import print_json, run_on_store
from laminar_cluster.views.probe_report import print_report


def run_store_check(url: str, *, timeout_s: float, as_json: bool) -> int:
    """Probe the store at `url`; return the exit code (0 when every check passed)."""

    async def probe(store: ObjectStore) -> ProbeReport:
        problem = await diagnose(store, url, must_exist=False)
        if problem is None:
            return await probe_store_contract(store, RealClock(), timeout_s=timeout_s)
        report = ProbeReport(store_url=store.url, key="")
        report.results = [
            CheckResult(name, False, problem if index == 0 else NOT_REACHED)
            for index, name in enumerate(CHECKS)
        ]
        return report

    report = run_on_store(url, probe, diagnosed=False)
    if as_json:
        print_json(
            {
                "store": report.store_url,
                "ok": report.ok,
                "checks": [
                    {"name": r.name, "ok": r.ok, "detail": r.detail} for r in report.results
                ],
            }
        )
    else:
        print_report(report)
    return 0 if report.ok else 1
