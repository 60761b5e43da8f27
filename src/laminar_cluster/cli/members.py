"""`laminar-cluster members --store URL [--json]`: the node process leases, read-only
(`views.members`): node, state (`dead` for a record older than its ttl that never left, or one
a leader took over after its process stopped: a SIGKILLed node is dead, not left), term, boot,
last renewal age. Exits 1 naming any corrupt object; never writes."""

from __future__ import annotations

from rich.text import Text

from laminar_cluster.clock import RealClock
from laminar_cluster.views.members import AGE_NOTE, LIVE_STATES, MembersView, view_members
from laminar_cluster.views.output import (
    cell,
    console,
    print_json,
    run_on_store,
    say_problem,
    show,
    table,
)


def run_members(url: str, *, as_json: bool) -> int:
    """Print the members; exit 1 naming each corrupt object."""

    view = run_on_store(
        url, lambda store: view_members(store, RealClock().wall_ms()), must_exist=True
    )
    if as_json:
        print_json(
            {
                "ok": not view.problems,
                "store": view.store,
                "members": view.members,
                "problems": view.problems,
                "note": AGE_NOTE,
            }
        )
    else:
        _print_table(view)
    return 1 if view.problems else 0


def state_text(state: str) -> Text:
    """A member state, coloured: green active, yellow other live states, red dead or
    suspected, dim left."""
    style = (
        "green"
        if state == "active"
        else "yellow"
        if state in LIVE_STATES
        else "dim"
        if state == "left"
        else "red"
    )
    return Text(state, style=style)


def _print_table(view: MembersView) -> None:
    console.print(f"store  {view.store}", markup=False, highlight=False, soft_wrap=True)
    if not view.members:
        console.print("no members")
    else:
        rows = table("node", "state", "term", "boot", "last renewal age", "why", wrap=("why",))
        for member in view.members:
            age_s = member["last_renewal_age_ms"] / 1000
            rows.add_row(
                cell(member["node"]),
                state_text(member["state"]),
                cell(member["term"]),
                member["boot"],
                f"{age_s:.1f} s ago (ttl {member['ttl_ms'] / 1000:g} s)",
                cell(member["why"]),
            )
        show(rows)
        console.print(f"note: {AGE_NOTE}", style="dim", soft_wrap=True)
    for problem in view.problems:
        say_problem("CORRUPT", problem["object"], problem["error"])
