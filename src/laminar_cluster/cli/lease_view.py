"""`laminar-cluster lease --store URL` and `laminar-cluster authority --store URL`: the leader
authority of a namespace, read-only (LA §2, LA §3.2, LA §3.4-§3.9, LA §4.1.1-§4.1.5).

`lease` shows who holds the head: owner, fencing token, renewal sequence, sequence, the age of
the head record (from the store's last_modified) and whether its `expires_at_ms` lies in the
future by this machine's wall clock, labelled as a diagnostic: leadership is never decided by
that field (LA-7). An empty namespace prints "no leader".

`authority` audits the whole log (`views.authority_audit`) and prints the decisions it finds:
outcomes, assignment decisions, faults, releases, the catalog seal and the floors. Both exit 1
naming the object on any violation; neither ever writes (the pointer is not repaired, the
deployment identity is not created).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from laminar_cluster.clock import RealClock
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.authority_audit import AuthorityAudit
from laminar_cluster.views.lease import (
    DIAGNOSTIC,
    LeaseView,
    audit_stable,
    decisions_of,
    view_lease,
)
from laminar_cluster.views.output import (
    cell,
    console,
    print_json,
    run_on_store,
    say_problem,
    show,
    table,
)
from laminar_cluster.views.references import check_authority_references


def run_lease(url: str, *, as_json: bool) -> int:
    """`laminar-cluster lease`: print the head lease; exit 1 naming a bad object."""

    view = run_on_store(url, lambda store: view_lease(store, RealClock()), must_exist=True)
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
    say = _say
    say("store", view.store)
    head = view.head
    if head is None and view.ok:
        console.print("no leader: the leader authority of this namespace is empty")
    if head is not None:
        owner = head["owner"]
        expiry = "in the future" if head["unexpired_by_local_wall_clock"] else "in the past"
        if not head["live"]:
            console.print(
                f"NO LIVE LEADER: the last leader was node {owner['node']} (token "
                f"{head['token']}); {head['why']}",
                style="red",
                markup=False,
                soft_wrap=True,
            )
        say(
            "leader" if head["live"] else "last leader",
            f"node {owner['node']}, boot {owner['boot']}, process term {owner['process_term']}",
        )
        say("fencing token", head["token"])
        say("renewal sequence", head["renewal_sequence"])
        say("sequence", f"{head['sequence']} (pointer {cell(view.pointer_sequence) or 'none'})")
        say(
            "head record age",
            f"{head['record_age_ms'] / 1000:.3f} s (last_modified; lease ttl "
            f"{head['ttl_ms'] / 1000:g} s)",
        )
        say(
            "expires_at_ms",
            f"{head['expires_at_ms']}: {expiry} ({head['expires_in_ms'] / 1000:+.3f} s)",
        )
        console.print(f"{'':<18}{DIAGNOSTIC}", style="dim", soft_wrap=True)
        say("catalog", head["catalog_sha256"] or "not sealed")
    for note in view.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for problem in view.problems:
        say_problem("CORRUPT", problem.object, problem.error)


def _say(label: str, value: Any) -> None:
    console.print(f"{label:<17} {cell(value)}", markup=False, highlight=False, soft_wrap=True)


def run_authority(url: str, *, as_json: bool) -> int:
    """`laminar-cluster authority`: audit the whole log and the references its outcomes make;
    exit 1 naming the first bad object."""

    async def work(store: ObjectStore) -> AuthorityAudit:
        clock = RealClock()
        audit = await audit_stable(store, clock)
        await check_authority_references(store, clock, audit)
        return audit

    audit = run_on_store(url, work, must_exist=True)
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
    _say("store", audit.store)
    if audit.head_sequence is None and audit.ok and not audit.listed:
        console.print("no leader: the leader authority of this namespace is empty")
        return
    _say(
        "head",
        f"sequence {cell(audit.head_sequence)} (pointer {cell(audit.pointer_sequence) or 'none'}); "
        f"{len(audit.records)} of {audit.listed} listed records audited",
    )
    _table("terms", summary["terms"], ("token", "owner", "first_sequence", "last_sequence"))
    columns = ("sequence", "epoch", "checkpoint_id", "verdict", "live")
    _table("checkpoint outcomes", summary["outcomes"], columns)
    columns = ("sequence", "kind", "target_version", "verdict", "live")
    _table("assignment decisions", summary["assignment_decisions"], columns)
    _table("recovery releases", summary["releases"], ("sequence", "generation", "epoch"))
    _print_carried(summary)
    for note in audit.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for problem in audit.problems:
        say_problem("AUDIT FAILED", problem.object, problem.error)
    if audit.ok:
        console.print(
            "the leader authority log is consistent, and every reference it makes resolves",
            style="green",
        )


def _print_carried(summary: dict[str, Any]) -> None:
    """The head's carried state, in words (never a Python repr)."""
    faults = summary["faults"]
    if faults is not None:
        slots = faults["slots"]
        active = sum(1 for slot in slots if slot["active"])
        _say(
            "recovery faults", f"revision {faults['revision']}, {len(slots)} slots, {active} active"
        )
        _table("fault slots", slots, ("node", "process_term", "request_sequence", "active"), True)
    catalog = summary["catalog"]
    _say(
        "catalog",
        "not sealed"
        if catalog is None
        else f"sealed: sha256 {catalog['sha256']}, {catalog['entry_count']} entries",
    )
    floor = summary["outcome_floor"]
    _say(
        "outcome floor",
        "none"
        if floor is None
        else f"authority before epoch {floor['authority_before_epoch']}, artifacts before "
        f"epoch {floor['artifact_before_epoch']}, terminal anchor epoch "
        f"{cell(floor['terminal_anchor_epoch']) or 'none'}, committed anchor epoch "
        f"{cell(floor['committed_anchor_epoch']) or 'none'}",
    )
    decision = summary["decision_floor"]
    _say(
        "decision floor",
        "none"
        if decision is None
        else f"before target version {decision['before_target_version']}, anchor target "
        f"version {cell(decision['anchor_target_version']) or 'none'}",
    )


def _table(
    title: str, rows: list[dict[str, Any]], columns: tuple[str, ...], quiet: bool = False
) -> None:
    if not rows:
        if not quiet:
            _say(title, "none")
        return
    shown = table(*columns, title=f"{title} ({len(rows)})")
    for row in rows:
        shown.add_row(*(cell(row.get(column)) for column in columns))
    show(shown)
