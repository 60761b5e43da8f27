"""`laminar-cluster store-check URL`: run the store contract probe and print each property."""

from __future__ import annotations

from rich.table import Table

from laminar_cluster.cli.output import console, print_json, run_on_store
from laminar_cluster.clock import RealClock
from laminar_cluster.store.probe import ProbeReport, probe_store_contract


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


def print_report(report: ProbeReport) -> None:
    table = Table(title=f"store contract: {report.store_url}")
    table.add_column("property")
    table.add_column("result")
    table.add_column("detail")
    for result in report.results:
        verdict = "[green]pass[/green]" if result.ok else "[red]FAIL[/red]"
        table.add_row(result.name, verdict, result.detail)
    console.print(table)
    if report.ok:
        console.print("[green]the store meets the contract the control plane needs[/green]")
    else:
        failed = ", ".join(r.name for r in report.failures())
        console.print(f"[red]the store fails the contract ({failed}); do not run a cluster on it")
