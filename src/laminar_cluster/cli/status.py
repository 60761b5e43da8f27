"""`laminar-cluster status --store URL [--json] [--check] [--watch [--interval S]]`: the
cluster at a glance, read-only (issue 7 "the views", issue 17 "Truthful views"; the sections are
read by `views.status`).

Leader and fencing token (or "no live leader (last: node 2, token 2, renewed 40 s ago; ...)"
when the head record is older than the lease ttl or its node is dead), members and their
states (dead when not renewed within their ttl, or taken over after they stopped), the
assignment head (version, draining or not, vnodes per node), the last committed cluster
checkpoint (epoch, age; its references checked), source lag per event-log partition with
the total, and the live store request rate per node and in total (JSON `requests`: per kind,
from the counters each node's lease record carries; a one-shot view reads the members twice, a
renewal apart, at most 10 s, so the rate is that of the last interval). `--watch` redraws the
view with rich `Live` every `--interval` seconds until Ctrl-C, keeping one membership observer;
with `--json` it prints one JSON document per interval.

Exit codes: a one-shot view exits 1 when a section found a problem (a bad record names its
object), and with `--check` also when no live leader holds the cluster (saying why, on
stderr); a watch exits 0 on Ctrl-C; never writes.
"""

from __future__ import annotations

import asyncio
import math
from typing import Final

from rich.live import Live
from rich.text import Text

from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.output import console, error_console, open_checked, print_json, show
from laminar_cluster.views.status import (
    STATUS_TIMEOUT_S,
    StatusReader,
    StatusView,
    event_log_opener,
    status_once,
)
from laminar_cluster.views.status_render import render

WATCH_INTERVAL_S_MIN: Final = 0.1


def run_status(
    url: str, *, as_json: bool, watch: bool, interval_s: float, check: bool = False
) -> int:
    """`laminar-cluster status`: print the view (or redraw it until Ctrl-C); exit 1 on a
    problem in the (last) view, and with `check` when no live leader holds the cluster."""
    if watch and not (math.isfinite(interval_s) and interval_s >= WATCH_INTERVAL_S_MIN):
        raise InvalidArgument(f"--interval must be >= {WATCH_INTERVAL_S_MIN} s, not {interval_s}")
    clock = RealClock()

    async def main() -> int:
        store = await open_checked(url, must_exist=True)
        try:
            if not watch:
                view = await status_once(store, clock)
                return _emit(view, as_json, check)
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
            live.update(render(view, footer=footer, compact=True), refresh=True)
            await clock.sleep_until(next_s)


def _emit(view: StatusView, as_json: bool, check: bool) -> int:
    """Print the view; its exit code."""
    failed = view.check() if check else None
    if as_json:
        document = view.as_json()
        if check:
            document["check"] = {"passed": failed is None, "reason": failed}
        print_json(document)
    else:
        show(render(view))
    if failed is not None:
        error_console.print(f"check failed: {failed}", markup=False, soft_wrap=True)
        return 1
    return 0 if view.ok else 1
