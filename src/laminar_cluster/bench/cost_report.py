"""`bench cost`'s figures for people: a table per phase (requests per second by protocol and
kind, dollars per node and month), the checkpoints, the targets and the producer."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from laminar_cluster.bench.cost_figures import KINDS, PROTOCOLS
from laminar_cluster.views.output import console, print_json


def print_cost(figures: dict[str, Any], *, as_json: bool) -> None:
    """The figures as JSON, or as a table per phase."""
    if as_json:
        print_json(figures)
        return
    prices = figures["prices"]
    console.print(
        f"{figures['nodes']} nodes on {figures['store']}; node options "
        f"{' '.join(figures['node_options'])}; prices per 1,000: PUT/LIST/POST "
        f"${prices['put_per_1000']}, GET/HEAD ${prices['get_per_1000']}, 30-day month",
        soft_wrap=True,
    )
    for phase in (figures["idle"], figures["busy"]):
        console.print(_phase_table(phase))
        checkpoints = phase["checkpoints"]
        console.print(
            f"  checkpoints committed: {checkpoints['committed']}; per checkpoint: "
            f"{checkpoints['checkpoint_objects_per_checkpoint']} requests on checkpoints/ "
            f"objects, {checkpoints['requests_per_checkpoint']} by the checkpoint tasks "
            f"({checkpoints['requests_per_checkpoint_with_retention']} with retention); "
            "per node: "
            + ", ".join(
                f"node {row['node']} ${row['usd_per_month']:.2f}/month" for row in phase["nodes"]
            ),
            soft_wrap=True,
        )
    met = ", ".join(
        f"{name} {row['value']} (max {row['max']}): {'met' if row['met'] else 'NOT met'}"
        for name, row in figures["targets"].items()
    )
    console.print(f"  targets: {met}", soft_wrap=True)
    producer = figures["busy"]["producer"]
    console.print(
        f"  producer: {producer['events']:,} events in {producer['batches']:,} batches "
        f"({producer['events_per_s']} events/s), its requests {producer['requests']}",
        soft_wrap=True,
    )


def _phase_table(phase: dict[str, Any]) -> Table:
    """Requests per second by protocol (rows) and kind, and dollars per node and month."""
    per_s, usd = phase["per_s"], phase["usd_per_node_month"]
    table = Table(
        "req/s",
        *KINDS,
        "all",
        "$/node/mo",
        title=f"{phase['phase']}: {phase['duration_s']:.0f} s, "
        f"{per_s['total']:.1f} requests/s, ${usd['total']:.2f} per node per month",
    )
    for protocol in PROTOCOLS:
        kinds = per_s["by_protocol_kind"][protocol]
        table.add_row(
            protocol,
            *(f"{kinds[kind]:.2f}" for kind in KINDS),
            f"{per_s['by_protocol'][protocol]:.2f}",
            f"{usd['by_protocol'][protocol]:.2f}",
        )
    table.add_row(
        "total",
        *(f"{per_s['by_kind'][kind]:.2f}" for kind in KINDS),
        f"{per_s['total']:.2f}",
        f"{usd['total']:.2f}",
        style="bold",
    )
    return table
