"""`laminar-cluster status --store URL [--json] [--watch [--interval S]]`: the cluster at a
glance, read-only (issue 7 "the views"; the sections are read by `cli.status_view`).

Leader and fencing token, members and their states, the assignment head (version, draining or
not, vnodes per node), the last committed cluster checkpoint (epoch, age) and source lag per
event-log partition with the total. `--watch` redraws the view with rich `Live` every
`--interval` seconds until Ctrl-C, keeping one membership observer, so nodes that stop renewing
turn `suspected`, then `dead`; with `--json` it prints one JSON document per interval. A
one-shot view exits 1 when a section found a problem, a watch exits 0 on Ctrl-C; never writes.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from laminar_cluster.cli.output import console, print_json
from laminar_cluster.cli.status_view import (
    MEMBERS_NOTE,
    EndOffsets,
    EventLogOpener,
    StatusReader,
    StatusView,
)
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.runtime.eventlog import EventLog
from laminar_cluster.store import ObjectStore, open_store

STATUS_TIMEOUT_S: Final = 30.0
WATCH_INTERVAL_S_MIN: Final = 0.1
LAG_PARTITION_ROWS_MAX: Final = 16  # the table shows the most lagging ones; JSON shows all


def event_log_opener(clock: Clock) -> EventLogOpener:
    """The event log behind the lag column (runtime.eventlog), on the status clock."""

    def open_log(store: ObjectStore) -> EndOffsets:
        return EventLog(store, clock=clock)

    return open_log


async def status_once(
    store: ObjectStore, clock: Clock, *, timeout_s: float = STATUS_TIMEOUT_S
) -> StatusView:
    """One status view of `store` (tests call it on a store they built)."""
    view = await StatusReader(store, clock, event_log_opener(clock)).read(timeout_s=timeout_s)
    view.notes.append(MEMBERS_NOTE)
    return view


def run_status(url: str, *, as_json: bool, watch: bool, interval_s: float) -> int:
    """`laminar-cluster status`: print the view (or redraw it until Ctrl-C); exit 1 on a
    problem in the (last) view."""
    if watch and not (math.isfinite(interval_s) and interval_s >= WATCH_INTERVAL_S_MIN):
        raise InvalidArgument(f"--interval must be >= {WATCH_INTERVAL_S_MIN} s, not {interval_s}")
    clock = RealClock()

    async def main() -> int:
        store = open_store(url)
        try:
            if not watch:
                view = await status_once(store, clock)
                _emit(view, as_json)
                return 0 if view.ok else 1
            return await _watch(store, clock, as_json=as_json, interval_s=interval_s)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 0


async def _watch(store: ObjectStore, clock: Clock, *, as_json: bool, interval_s: float) -> int:
    """Read and show a view every `interval_s` until cancelled (Ctrl-C)."""
    reader = StatusReader(store, clock, event_log_opener(clock))
    timeout_s = min(STATUS_TIMEOUT_S, interval_s * 10)
    footer = f"every {interval_s:g} s; Ctrl-C to stop"
    if as_json:  # one document per interval; no live display on a program's stdout
        while True:
            next_s = clock.monotonic() + interval_s
            print_json((await reader.read(timeout_s=timeout_s)).as_json())
            await clock.sleep_until(next_s)
    with Live(Text("reading the cluster..."), console=console, auto_refresh=False) as live:
        while True:
            next_s = clock.monotonic() + interval_s
            view = await reader.read(timeout_s=timeout_s)
            live.update(render(view, footer=footer), refresh=True)
            await clock.sleep_until(next_s)


def _emit(view: StatusView, as_json: bool) -> None:
    if as_json:
        print_json(view.as_json())
    else:
        console.print(render(view))


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
