"""The store contract probe's report as a table: each property, pass or fail, and the detail."""

from __future__ import annotations

from rich.table import Table

from laminar_cluster.store.probe import ProbeReport
from laminar_cluster.views.output import console


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
