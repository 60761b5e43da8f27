"""`laminar-cluster store-check URL`: run the store contract probe and print each property."""

from __future__ import annotations

from laminar_cluster.clock import RealClock
from laminar_cluster.store.probe import probe_store_contract
from laminar_cluster.views.output import print_json, run_on_store
from laminar_cluster.views.probe_report import print_report


def run_store_check(url: str, *, timeout_s: float, as_json: bool) -> int:
    """Probe the store at `url`; return the exit code (0 when every check passed)."""
    report = run_on_store(
        url, lambda store: probe_store_contract(store, RealClock(), timeout_s=timeout_s)
    )
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
