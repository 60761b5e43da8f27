"""`laminar-cluster demo`: the main job (issue 7 "The main job and the views"; `make demo`).

On a fresh store (a temporary local directory unless `--store` names one; then a fresh
namespace under it) it

1. probes the store contract (the properties the control plane relies on);
2. runs the scenario of `demo_run`: 3 stream node processes, the deterministic workload
   (default 1,000,000 events over 64 partitions and 10,000 keys) produced in quarters, a
   fourth node joining, the leader SIGKILLed, a follower SIGTERMed (graceful leave), until
   the last committed checkpoint covers every event; the live cluster view meanwhile;
3. checks the committed output against the aggregates computed independently from the
   workload generator (`demo_check`): every key's count and sum equal, so no event was lost
   and none counted twice;
4. prints a summary: events per second (committed events over the time from the first event
   let into the log to the last one committed, faults included), checkpoints committed and
   aborted, rotations (committed assignment versions after the seed), failover time (leader
   SIGKILL to the new leader's first committed checkpoint), recovery time (SIGKILL to the
   first commit covering the killed node's vnodes), graceful leave time, and the check.

Exit 0 only if the check passed; 1 if it failed (naming the first wrong key) or the scenario
did not finish. The store and node logs of a failed run are kept and their paths printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Final

from rich.markup import escape
from rich.table import Table

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.cli.bench_rebalance_fleet import NodeFleet, NodeTimings
from laminar_cluster.cli.demo_check import CheckResult, check_exactly_once
from laminar_cluster.cli.demo_run import DemoScenario, Marks, timings_for
from laminar_cluster.cli.demo_view import DemoView
from laminar_cluster.cli.output import console, error_console, print_json
from laminar_cluster.cli.pipeline_logs import checkpoint_figures, rotations
from laminar_cluster.cli.store_check import print_report
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.lease.cluster_outcome_reads import cluster_outcomes
from laminar_cluster.rebalance.node_config import VNODE_COUNT_DEFAULT
from laminar_cluster.runtime.output import committed_checkpoints, open_output_authority
from laminar_cluster.runtime.workload import Workload, expected_aggregates
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.probe import ProbeReport, probe_store_contract

SEED: Final = 7
PROBE_TIMEOUT_S: Final = 30.0
CHECK_TIMEOUT_S: Final = 300.0


def run_demo(
    store_url: str | None,
    *,
    events: int = 1_000_000,
    partitions: int = 64,
    keys: int = 10_000,
    vnode_count: int = VNODE_COUNT_DEFAULT,
    as_json: bool = False,
) -> int:
    """The whole demo; its exit code."""
    workload = Workload(seed=SEED, events=events, partitions=partitions, keys=keys)
    scratch = Path(tempfile.mkdtemp(prefix="laminar-demo-"))
    url = f"file://{scratch}/store" if store_url is None else fresh_namespace(store_url)
    view = DemoView(console, events, quiet=as_json)
    view.say(f"[bold]laminar-cluster demo[/bold]  store {url}")
    started = time.monotonic()
    timings = dataclasses.replace(timings_for(url), vnode_count=vnode_count)
    figures, passed = asyncio.run(_demo(url, workload, scratch, view, timings))
    figures["wall_s"] = round(time.monotonic() - started, 2)
    if as_json:
        print_json(figures)
    else:
        _print_summary(figures)
    if passed and store_url is None:
        shutil.rmtree(scratch, ignore_errors=True)
    elif not passed:
        error_console.print(
            f"kept for inspection: node logs in {scratch}, store {url}", soft_wrap=True
        )
    return 0 if passed else 1


def fresh_namespace(url: str) -> str:
    """`url` with a fresh path segment: an empty namespace of a shared store."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() == "memory":
        raise InvalidArgument(f"{url}: memory:// lives in one process; the nodes are processes")
    path = f"{parsed.path.rstrip('/')}/demo-{uuid.uuid4().hex[:12]}"
    return urllib.parse.urlunsplit(parsed._replace(path=path))


async def _demo(
    url: str, workload: Workload, scratch: Path, view: DemoView, timings: NodeTimings
) -> tuple[dict[str, Any], bool]:
    clock = RealClock()
    store = open_store(url)
    figures: dict[str, Any] = {
        "store": url,
        "workload": _workload_json(workload),
        "vnodes": timings.vnode_count,
    }
    try:
        probe = await probe_store_contract(store, clock, timeout_s=PROBE_TIMEOUT_S)
        figures["store_contract"] = {"ok": probe.ok, "checks": len(probe.results)}
        _show_probe(view, probe)
        if not probe.ok:
            return figures, False
        with NodeFleet(url, scratch, timings) as fleet:
            scenario = DemoScenario(store, clock, fleet, workload, view)
            try:
                with view:
                    marks = await scenario.run()
            except LaminarError as error:
                view.say("[red]demo stopped[/red]")
                view.say(f"{type(error).__name__}: {error}", markup=False)
                figures["error"] = f"{type(error).__name__}: {error}"
                return figures, False
            fleet.refresh()
            figures.update(_scenario_figures(fleet, marks, workload))
        figures["checkpoints"].update(await _outcome_counts(store, clock))
        head = await AssignmentSnapshotStore(store).head_version()
        figures["assignment_version"] = head
        figures["rotations"] = 0 if head is None else head - 1
        view.say("checking the committed output against the expected aggregates...")
        check = await _check(store, clock, workload)
        figures["check"] = check.as_json()
        return figures, check.passed
    finally:
        await store.close()


def _show_probe(view: DemoView, probe: ProbeReport) -> None:
    if probe.ok:
        view.say(
            f"store contract: all {len(probe.results)} properties hold (conditional create and "
            "update, read-after-write, sorted listing, ...)"
        )
    elif not view.quiet:
        print_report(probe)


async def _check(store: ObjectStore, clock: Clock, workload: Workload) -> CheckResult:
    deadline = clock.monotonic() + CHECK_TIMEOUT_S
    expected = await asyncio.to_thread(expected_aggregates, workload)
    return await check_exactly_once(store, clock, workload, deadline=deadline, expected=expected)


async def _outcome_counts(store: ObjectStore, clock: Clock) -> dict[str, int]:
    """Committed cluster checkpoints (sink commit markers and live Commits: the authority
    forgets Commits below its artifact floor, DC-14) and the Aborts the authority still lists
    (it forgets older ones when it compacts its history)."""
    authority = open_output_authority(store, clock)
    committed = await committed_checkpoints(authority)
    outcomes = await cluster_outcomes(authority)
    return {
        "committed": len(committed),
        "aborted": sum(1 for outcome in outcomes if not outcome.is_commit()),
    }


def _scenario_figures(fleet: NodeFleet, marks: Marks, workload: Workload) -> dict[str, Any]:
    assert marks.produce_started is not None and marks.all_committed is not None
    processing_s = marks.all_committed - marks.produce_started
    logged = checkpoint_figures(fleet.runs)
    kill = marks.kill
    leaver = marks.leaver
    return {
        "events_per_s": round(workload.events / max(processing_s, 1e-9)),
        "processing_s": round(processing_s, 2),
        "produce_s": None
        if marks.produced_all is None
        else round(marks.produced_all - marks.produce_started, 2),
        "checkpoints": {
            "logged_committed": logged["committed"],
            "logged_failed": logged["failed"],
            "duration_p50_s": logged["duration_p50_s"],
            "duration_p99_s": logged["duration_p99_s"],
        },
        "rotations_logged": len(rotations(fleet.runs)),
        "join_s": None
        if marks.joined is None or marks.join_started is None
        else round(marks.joined - marks.join_started, 2),
        "leader_kill": None if kill is None else kill.as_json(),
        "leave": None
        if leaver is None or marks.left is None or marks.leave_started is None
        else {"node": leaver.node, "left_s": round(marks.left - marks.leave_started, 2)},
    }


def _workload_json(workload: Workload) -> dict[str, int]:
    return {
        "seed": workload.seed,
        "events": workload.events,
        "partitions": workload.partitions,
        "keys": workload.keys,
    }


def _print_summary(figures: dict[str, Any]) -> None:
    table = Table(title="summary", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    workload = figures["workload"]
    table.add_row(
        "workload",
        f"{workload['events']:,} events, {workload['partitions']} partitions, "
        f"{workload['keys']:,} keys (seed {workload['seed']}); "
        f"{figures.get('vnodes') or VNODE_COUNT_DEFAULT} vnodes",
    )
    if "events_per_s" in figures:
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
                f"the killed node's vnodes in a committed checkpoint after "
                f"{_s(kill['recovery_s'])}",
            )
        leave = figures["leave"]
        if leave is not None:
            table.add_row("leave", f"node {leave['node']} left gracefully in {_s(leave['left_s'])}")
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


def _first_wrong(check: dict[str, Any]) -> str:
    first = check["first_wrong"][0]
    return (
        f"{first['key']}: committed (count, sum) {tuple(first['committed'])}, "
        f"expected {tuple(first['expected'])}"
    )


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
