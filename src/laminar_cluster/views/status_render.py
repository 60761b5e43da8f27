"""The status view rendered for people: a summary, the members, and the most lagging source
partitions, as rich renderables (`laminar-cluster status` and the demo's live display)."""

from __future__ import annotations

from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from laminar_cluster.views.status import (
    StatusView,
)


def render(view: StatusView, *, footer: str | None = None) -> RenderableType:
    """The view for people: a summary, the members table, the lag table, notes, problems."""
    parts: list[RenderableType] = [_summary(view), _members(view)]
    lag = _lag(view)
    if lag is not None:
        parts.append(lag)
    parts.extend(Text(f"note: {note}", style="dim") for note in view.notes)
    for problem in view.problems:
        where = problem["object"] or problem["section"]
        parts.append(Text(f"PROBLEM {where}: {problem['error']}", style="red"))
    if footer is not None:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)


def _summary(view: StatusView) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("store", view.store)
    leader = view.leader
    table.add_row(
        "leader",
        "none"
        if leader is None
        else f"node {leader['node']}  token {leader['token']}  (head record age "
        f"{leader['record_age_ms'] / 1000:.1f} s)",
    )
    table.add_row("assignment", _assignment_text(view.assignment))
    table.add_row("checkpoint", _checkpoint_text(view.checkpoint))
    lag = view.lag
    table.add_row("source lag", "unknown" if not lag.get("known") else f"{lag['total']:,} events")
    return table


def _assignment_text(assignment: dict[str, Any] | None) -> str:
    if assignment is None:
        return "none"
    text = f"version {assignment['head_version']}"
    drain = assignment["drain"]
    if assignment["draining"] and drain is not None:
        text += f"  DRAINING v{drain['from_version']} -> v{drain['to_version']}"
    elif assignment["draining"]:
        text += "  DRAINING"
    else:
        text += "  committed"
    return text + f"  ({assignment['vnode_count']} vnodes)"


def _checkpoint_text(checkpoint: dict[str, Any] | None) -> str:
    if checkpoint is None:
        return "none committed"
    age = checkpoint["age_ms"]
    age_text = "age unknown" if age is None else f"{age / 1000:.1f} s ago"
    return (
        f"epoch {checkpoint['epoch']}  assignment v{checkpoint['assignment_version']}  "
        f"{age_text}  ({checkpoint['source_partitions']} partitions, "
        f"{checkpoint['committed_events']:,} events committed)"
    )


def _members(view: StatusView) -> RenderableType:
    if not view.members:
        return Text("no members")
    table = Table("node", "state", "term", "vnodes", "boot", "failure domain", title="members")
    for member in view.members:
        state = member["state"]
        style = "green" if state == "active" else "yellow" if state != "left" else "dim"
        leader = view.leader is not None and view.leader["node"] == member["node"]
        table.add_row(
            f"{member['node']}{' *' if leader else ''}",
            Text(state, style=style),
            str(member["term"]),
            str(member["vnodes"]),
            member["boot"],
            member["failure_domain"] or "",
        )
    return table


def _lag(view: StatusView) -> Table | None:
    rows = view.lag.get("partitions") or []
    if not rows:
        return None
    worst = sorted(rows, key=lambda row: (-row["lag"], row["partition"]))[:LAG_PARTITION_ROWS_MAX]
    shown = "" if len(worst) == len(rows) else f" (the {len(worst)} most behind of {len(rows)})"
    table = Table("partition", "end", "committed", "lag", title=f"source lag{shown}")
    for row in worst:
        table.add_row(
            str(row["partition"]),
            f"{row['end_offset']:,}",
            f"{row['committed_offset']:,}",
            f"{row['lag']:,}",
        )
    return table


LAG_PARTITION_ROWS_MAX: Final = 16  # the table shows the most lagging ones; JSON shows all
