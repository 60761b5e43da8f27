"""`laminar-cluster lease --store URL` and `laminar-cluster authority --store URL`: the leader
authority of a namespace, read-only (spec_leader_lease §2, §3.2, §3.4-§3.9, §4.1.1-§4.1.5).

`lease` shows who holds the head: owner, fencing token, renewal sequence, sequence, the age of
the head record (from the store's last_modified) and whether its `expires_at_ms` lies in the
future by this machine's wall clock, labelled as a diagnostic: leadership is never decided by
that field (S7). An empty namespace prints "no leader".

`authority` audits the whole log (`views.authority_audit`) and prints the decisions it finds:
outcomes, assignment decisions, faults, releases, the catalog seal and the floors. Both exit 1
naming the object on any violation; neither ever writes (the pointer is not repaired, the
deployment identity is not created).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from laminar_cluster.clock import RealClock
from laminar_cluster.views.authority_audit import AuthorityAudit
from laminar_cluster.views.lease import (
    DIAGNOSTIC,
    LeaseView,
    audit_stable,
    decisions_of,
    view_lease,
)
from laminar_cluster.views.output import console, print_json, run_on_store


def run_lease(url: str, *, as_json: bool) -> int:
    """`laminar-cluster lease`: print the head lease; exit 1 naming a bad object."""

    view = run_on_store(url, lambda store: view_lease(store, RealClock()))
    if as_json:
        print_json(
            {
                "ok": view.ok,
                "store": view.store,
                "leader": view.head is not None,
                "pointer_sequence": view.pointer_sequence,
                "head": view.head,
                "notes": view.notes,
                "problems": [dataclasses.asdict(problem) for problem in view.problems],
            }
        )
    else:
        _print_lease(view)
    return 0 if view.ok else 1


def _print_lease(view: LeaseView) -> None:
    console.print(f"store             {view.store}")
    head = view.head
    if head is None and view.ok:
        console.print("no leader: the leader authority of this namespace is empty")
    if head is not None:
        owner = head["owner"]
        expiry = "in the future" if head["unexpired_by_local_wall_clock"] else "in the past"
        console.print(
            f"leader            node {owner['node']}, boot {owner['boot']}, "
            f"process term {owner['process_term']}"
        )
        console.print(f"fencing token     {head['token']}")
        console.print(f"renewal sequence  {head['renewal_sequence']}")
        console.print(f"sequence          {head['sequence']} (pointer {view.pointer_sequence})")
        console.print(f"head record age   {head['record_age_ms'] / 1000:.3f} s (last_modified)")
        console.print(
            f"expires_at_ms     {head['expires_at_ms']}: {expiry} "
            f"({head['expires_in_ms'] / 1000:+.3f} s)"
        )
        console.print(f"                  [dim]{DIAGNOSTIC}[/dim]")
        console.print(f"catalog           {head['catalog_sha256'] or 'not sealed'}")
    for note in view.notes:
        console.print(f"note: {note}")
    for problem in view.problems:
        console.print(f"[red]CORRUPT[/red] {problem.object}: {problem.error}")


def run_authority(url: str, *, as_json: bool) -> int:
    """`laminar-cluster authority`: audit the whole log; exit 1 naming the first bad object."""

    audit = run_on_store(url, lambda store: audit_stable(store, RealClock()))
    summary = decisions_of(audit)
    if as_json:
        print_json(
            {
                "ok": audit.ok,
                "store": audit.store,
                "pointer_sequence": audit.pointer_sequence,
                "head_sequence": audit.head_sequence,
                "records": len(audit.records),
                "listed": audit.listed,
                **summary,
                "notes": audit.notes,
                "problems": [dataclasses.asdict(problem) for problem in audit.problems],
            }
        )
    else:
        _print_authority(audit, summary)
    return 0 if audit.ok else 1


def _print_authority(audit: AuthorityAudit, summary: dict[str, Any]) -> None:
    console.print(f"store             {audit.store}")
    if audit.head_sequence is None and audit.ok and not audit.listed:
        console.print("no leader: the leader authority of this namespace is empty")
        return
    console.print(
        f"head              sequence {audit.head_sequence} (pointer {audit.pointer_sequence}); "
        f"{len(audit.records)} of {audit.listed} listed records audited"
    )
    _table("terms", summary["terms"], ("token", "owner", "first_sequence", "last_sequence"))
    columns = ("sequence", "epoch", "checkpoint_id", "verdict", "live")
    _table("checkpoint outcomes", summary["outcomes"], columns)
    columns = ("sequence", "kind", "target_version", "verdict", "live")
    _table("assignment decisions", summary["assignment_decisions"], columns)
    _table("recovery releases", summary["releases"], ("sequence", "generation", "epoch"))
    for name in ("faults", "catalog", "outcome_floor", "decision_floor"):
        console.print(f"{name:<17} {summary[name]}")
    for note in audit.notes:
        console.print(f"note: {note}")
    for problem in audit.problems:
        console.print(f"[red]AUDIT FAILED[/red] {problem.object}: {problem.error}")
    if audit.ok:
        console.print("[green]the leader authority log is consistent[/green]")


def _table(title: str, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> None:
    if not rows:
        console.print(f"{title:<17} none")
        return
    table = Table(title=f"{title} ({len(rows)})")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in columns))
    console.print(table)
