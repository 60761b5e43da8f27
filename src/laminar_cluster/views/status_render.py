"""The status view rendered for people: a summary, the members, and the most lagging source
partitions, as rich renderables (`laminar-cluster status` and the demo's live display). Values
never break mid-value: `views.output.show` widens past 80 columns when needed; a live display
cannot widen, so `compact` shows each boot by its first 8 characters (like a short commit id)
to keep the members table within 80 columns. Why a member is dead or suspected is a line
under the table."""

from __future__ import annotations

from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from laminar_cluster.views.members import LIVE_STATES
from laminar_cluster.views.output import cell, table
from laminar_cluster.views.status import StatusView, leader_text

LAG_PARTITION_ROWS_MAX: Final = 16  # the table shows the most lagging ones; JSON shows all


BOOT_SHORT_CHARS: Final = 8


def render(view: StatusView, *, footer: str | None = None, compact: bool = False) -> RenderableType:
    """The view for people: a summary, the members table (and why a member is dead or
    suspected), the lag table, notes, problems."""
    parts: list[RenderableType] = [_summary(view), _members(view, compact)]
    parts.extend(
        Text(f"node {m['node']} {m['state']}: {m['why']}", style="red")
        for m in view.members
        if m.get("why")
    )
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
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()  # folds at word boundaries when the console cannot widen
    grid.add_row("store", Text(view.store))
    leader = view.leader
    if leader is None:
        grid.add_row("leader", "none")
    else:
        grid.add_row("leader", Text(leader_text(leader), style="" if view.live_leader else "red"))
    grid.add_row("assignment", _assignment_text(view.assignment))
    grid.add_row("checkpoint", _checkpoint_text(view.checkpoint))
    lag = view.lag
    grid.add_row("source lag", "unknown" if not lag.get("known") else f"{lag['total']:,} events")
    grid.add_row("store requests", _requests_text(view.requests))
    jobs = [job for job in map(_job_of, view.members) if job is not None]
    if jobs:
        late, dead = (sum(job[name] for job in jobs) for name in ("late_events", "dead_letters"))
        grid.add_row(
            "job",
            f"{late:,} late events, {dead:,} dead letters "
            f"(in the vnodes of {len(jobs)} running node{'s' if len(jobs) > 1 else ''})",
        )
    return grid


def _requests_text(requests: dict[str, Any] | None) -> str:
    """`41.2/s: get 30.1, put 6.0, list 5.1 (3 nodes, over their last renewal interval)`."""
    if requests is None or not requests["nodes"]:
        return "unknown (no live node reports its requests)"
    total = requests["total_per_s"]
    kinds = ", ".join(f"{kind} {total[kind]:g}" for kind in requests["kinds"] if total[kind])
    nodes = requests["nodes"]
    bases = {row["basis"] for row in nodes}
    basis = (
        "over their last renewal interval"
        if bases == {"interval"}
        else "some averaged since their process started"
    )
    return f"{sum(total.values()):.1f}/s: {kinds or 'none'} ({len(nodes)} nodes, {basis})"


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


def _state_style(state: str) -> str:
    if state == "active":
        return "green"
    if state in LIVE_STATES:
        return "yellow"
    return "dim" if state == "left" else "red"


def _members(view: StatusView, compact: bool) -> RenderableType:
    """The members table; with the columns `late` and `dead letters` when a node running a
    job reports them (ML-12: the figures of its last renewal; `-` for a node without them),
    except in `compact` (80 columns: the summary's `job` row has their totals)."""
    if not view.members:
        return Text("no members")
    jobs = not compact and any(_job_of(member) is not None for member in view.members)
    job_columns = ("late", "dead letters") if jobs else ()
    rows = table(
        "node", "state", "term", "vnodes", "renewed", "req/s", *job_columns, "boot", title="members"
    )
    rates = {} if view.requests is None else {r["node"]: r for r in view.requests["nodes"]}
    for member in view.members:
        state = member["state"]
        leader = (
            view.live_leader and view.leader is not None and view.leader["node"] == member["node"]
        )
        rows.add_row(
            f"{member['node']}{' *' if leader else ''}",
            Text(state, style=_state_style(state)),
            cell(member["term"]),
            cell(member.get("vnodes", 0)),
            f"{member['last_renewal_age_ms'] / 1000:.1f} s ago",
            _node_rate(rates.get(member["node"])),
            *(_job_cells(_job_of(member)) if jobs else ()),
            member["boot"][:BOOT_SHORT_CHARS] if compact else member["boot"],
        )
    return rows


def _job_of(member: dict[str, Any]) -> dict[str, int] | None:
    """A running node's job figures; none for a node that is dead or left (it runs nothing:
    its record keeps the figures of its last renewal, which `--json` still shows)."""
    running = member["state"] in LIVE_STATES or member["state"] == "suspected"
    return member.get("job") if running else None


def _job_cells(job: dict[str, int] | None) -> tuple[str, str]:
    if job is None:
        return "-", "-"
    return f"{job['late_events']:,}", f"{job['dead_letters']:,}"


def _node_rate(row: dict[str, Any] | None) -> str:
    """A node's requests per second, `~` marking an average since its process started."""
    if row is None:
        return "-"
    rate = sum(row["per_s"].values())
    return f"{rate:.1f}" if row["basis"] == "interval" else f"~{rate:.1f}"


def _lag(view: StatusView) -> Table | None:
    rows = view.lag.get("partitions") or []
    if not rows:
        return None
    worst = sorted(rows, key=lambda row: (-row["lag"], row["partition"]))[:LAG_PARTITION_ROWS_MAX]
    shown = "" if len(worst) == len(rows) else f" (the {len(worst)} most behind of {len(rows)})"
    lag = table("partition", "end", "committed", "lag", title=f"source lag{shown}")
    for row in worst:
        lag.add_row(
            str(row["partition"]),
            f"{row['end_offset']:,}",
            f"{row['committed_offset']:,}",
            f"{row['lag']:,}",
        )
    return lag
