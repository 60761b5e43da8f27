"""`laminar-cluster demo`: the main job (issue 7 "The main job and the views"; `make demo`).

On a fresh store (a temporary local directory unless `--store` names one; then a fresh
namespace under it) it

1. probes the store contract (the properties the control plane relies on);
2. runs the scenario of `demo_run`: 3 stream node processes running the reference job
   `count_sum` (`harness.reference_jobs`, written with the public job API: count and sum per
   key), the deterministic workload (default 1,000,000 events over 64 partitions and 10,000
   keys) produced as records through the public `Producer` into a record log of 256
   partitions, in quarters, a fourth node joining, the leader SIGKILLed, a follower SIGTERMed
   (graceful leave), until the last committed checkpoint covers every event; the live cluster
   view meanwhile;
3. checks the job's committed output (per key the count and sum of the newest committed
   checkpoint) against the aggregates computed independently from the workload generator
   (`exactly_once.check_job_exactly_once`): every key's count and sum equal, so no event was
   lost and none counted twice;
4. prints a summary: events per second (committed events over the time from the first event
   let into the log to the last one committed, faults included), checkpoints committed and
   aborted, rotations (committed assignment versions after the seed), failover time (leader
   SIGKILL to the new leader's first committed checkpoint), recovery time (SIGKILL to the
   first commit covering the killed node's vnodes), graceful leave time, and the check.

Exit 0 only if the check passed; 1 if it failed (naming the first wrong key) or the scenario
did not finish. It says at the start where it keeps its files (a scratch directory with the
node logs, and the local store unless `--store` names one), and removes them at the end unless
`--keep` is given or the run failed (then their paths are printed). Store URLs are shown with
their secrets redacted (`secret_access_key=***`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from laminar_cluster.clock import RealClock
from laminar_cluster.harness.demo import (
    SEED,
    fresh_namespace,
    run_demo_scenario,
)
from laminar_cluster.harness.demo_run import timings_for
from laminar_cluster.harness.demo_view import DemoView
from laminar_cluster.harness.workload import Workload
from laminar_cluster.rebalance.node.config import VNODE_COUNT_DEFAULT
from laminar_cluster.store.diagnose import redact_url
from laminar_cluster.views.output import console, error_console, print_json


def run_demo(
    store_url: str | None,
    *,
    events: int = 1_000_000,
    partitions: int = 64,
    keys: int = 10_000,
    vnode_count: int = VNODE_COUNT_DEFAULT,
    keep: bool = False,
    as_json: bool = False,
) -> int:
    """The whole demo; its exit code."""
    workload = Workload(seed=SEED, events=events, partitions=partitions, keys=keys)
    scratch = Path(tempfile.mkdtemp(prefix="laminar-demo-"))
    url = f"file://{scratch}/store" if store_url is None else fresh_namespace(store_url)
    view = DemoView(console, events, quiet=as_json)
    view.say(f"[bold]laminar-cluster demo[/bold]  store {escape(redact_url(url))}")
    fate = "kept (--keep)" if keep else "removed at the end unless the run fails (--keep keeps it)"
    view.say(
        f"scratch directory {escape(str(scratch))} (node logs{_store_part(store_url)}): {fate}"
    )
    clock = RealClock()
    started = clock.monotonic()
    timings = dataclasses.replace(timings_for(url), vnode_count=vnode_count)
    try:
        figures, passed = asyncio.run(run_demo_scenario(url, workload, scratch, view, timings))
    except KeyboardInterrupt:
        error_console.print(
            f"interrupted: kept node logs in {scratch}, store {redact_url(url)}",
            soft_wrap=True,
            markup=False,
        )
        return EXIT_INTERRUPTED
    figures["wall_s"] = round(clock.monotonic() - started, 2)
    figures["store"] = redact_url(url)
    kept = keep or not passed
    figures["scratch"] = {"path": str(scratch), "kept": kept}
    if as_json:
        print_json(figures)
    else:
        _print_summary(figures)
    if not kept:
        shutil.rmtree(scratch, ignore_errors=True)
        view.say(f"removed the scratch directory {escape(str(scratch))}")
    else:
        why = "kept (--keep)" if passed else "kept for inspection"
        error_console.print(
            f"{why}: node logs in {scratch}, store {redact_url(url)}",
            soft_wrap=True,
            markup=False,
        )
    return 0 if passed else 1


EXIT_INTERRUPTED = 130  # the shell's code for SIGINT


def _store_part(store_url: str | None) -> str:
    return ", and the store" if store_url is None else ""


def _print_summary(figures: dict[str, Any]) -> None:
    table = Table(title="summary", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    workload = figures["workload"]
    table.add_row(
        "workload",
        f"{workload['events']:,} events, {workload['partitions']} partitions, "
        f"{workload['keys']:,} keys (seed {workload['seed']}) as records in a log of "
        f"{workload['record_partitions']} partitions; "
        f"{figures.get('vnodes') or VNODE_COUNT_DEFAULT} vnodes; job {figures['job']}",
    )
    if "events_per_s" in figures:
        _scenario_rows(table, figures)
    check = figures.get("check")
    if check is not None:
        verdict = (
            f"[green]passed[/green]: every one of {check['expected_events']:,} events counted "
            f"exactly once ({check['keys']:,} keys: count and sum equal)"
            if check["passed"]
            else f"[red]FAILED[/red]: {check['wrong_keys']:,} keys differ, {check['lost']:,} "
            f"events lost, {check['duplicated']:,} counted twice; first wrong key "
            f"{_first_wrong(check)}"
        )
        table.add_row("exactly once", verdict)
    elif "error" in figures:
        first_line = escape(figures["error"].splitlines()[0])
        table.add_row("result", f"[red]not finished[/red]: {first_line}")
    table.add_row("wall time", _s(figures.get("wall_s")))
    console.print(table)


def _scenario_rows(table: Table, figures: dict[str, Any]) -> None:
    """Throughput, checkpoints, rotations, join, failover, recovery and leave."""
    workload = figures["workload"]
    table.add_row(
        "throughput",
        f"{figures['events_per_s']:,} events/s committed ({workload['events']:,} events "
        f"in {figures['processing_s']:.1f} s from the first produced to the last committed; "
        "the workload is let in quarter by quarter as the faults happen, so this is the "
        "scenario's pace: `bench pipeline` measures throughput)",
    )
    cp = figures["checkpoints"]
    table.add_row(
        "checkpoints",
        f"{cp.get('committed', '?')} committed, {cp.get('aborted', '?')} aborted; "
        f"periodic ones took p50 {_s(cp['duration_p50_s'])}, p99 {_s(cp['duration_p99_s'])}",
    )
    table.add_row(
        "rotations",
        f"{figures['rotations']} assignment versions after the seed (the join, the "
        "recovery from the leader's loss, the leave)",
    )
    table.add_row("join", f"node 4 running its vnodes after {_s(figures['join_s'])}")
    kill = figures["leader_kill"]
    if kill is not None:
        table.add_row(
            "failover",
            f"leader node {kill['killed_node']} SIGKILLed: a new leader after "
            f"{_s(kill['new_leader_s'])}, its first committed checkpoint after "
            f"{_s(kill['failover_s'])}",
        )
        table.add_row(
            "recovery",
            f"the killed node's vnodes in a committed checkpoint after {_s(kill['recovery_s'])}",
        )
    leave = figures["leave"]
    if leave is not None:
        table.add_row("leave", f"node {leave['node']} left gracefully in {_s(leave['left_s'])}")


def _first_wrong(check: dict[str, Any]) -> str:
    first = check["first_wrong"][0]
    return (
        f"{first['key']}: committed (count, sum) {tuple(first['committed'])}, "
        f"expected {tuple(first['expected'])}"
    )


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
