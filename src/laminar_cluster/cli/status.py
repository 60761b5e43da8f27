"""`laminar-cluster status --store URL [--json] [--watch [--interval S]]`: the cluster at a
glance, read-only (issue 7 "the views"; the sections are read by `views.status`).

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
from typing import Final

from rich.live import Live
from rich.text import Text

from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.views.output import console, print_json
from laminar_cluster.views.status import (
    STATUS_TIMEOUT_S,
    StatusReader,
    StatusView,
    event_log_opener,
    status_once,
)
from laminar_cluster.views.status_render import (
    render,
)

WATCH_INTERVAL_S_MIN: Final = 0.1


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
