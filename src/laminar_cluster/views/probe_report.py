"""The store contract probe's report as a table: each property, pass or fail, and the detail."""

from __future__ import annotations

from rich.text import Text

from laminar_cluster.store.probe import ProbeReport
from laminar_cluster.views.output import console, show, table


def print_report(report: ProbeReport) -> None:
    """The store URL (redacted), then one row per property: pass or FAIL and the detail."""
    console.print(f"store contract: {report.store_url}", markup=False, soft_wrap=True)
    rows = table("property", "result", "detail", wrap=("detail",))
    for result in report.results:
        verdict = Text("pass", style="green") if result.ok else Text("FAIL", style="red")
        rows.add_row(result.name, verdict, Text(result.detail))
    show(rows)
    if report.ok:
        console.print("[green]the store meets the contract the control plane needs[/green]")
    else:
        failed = ", ".join(r.name for r in report.failures())
        console.print(
            f"[red]the store fails the contract ({failed}); do not run a cluster on it",
            soft_wrap=True,
        )
