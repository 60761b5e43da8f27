"""The demo's run (`laminar-cluster demo`): probe the store, run the scenario of `demo_run`
(nodes running the reference job `count_sum`) on a node fleet, count the outcomes and check the
job's committed output exactly once (`exactly_once.check_job_exactly_once`); it returns the
figures the command prints."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Final

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcomes
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.harness.demo_run import JOB_PATH, DemoScenario, Marks
from laminar_cluster.harness.demo_view import DemoView
from laminar_cluster.harness.exactly_once import CheckResult, check_job_exactly_once
from laminar_cluster.harness.fleet import NodeFleet, NodeTimings
from laminar_cluster.harness.pipeline_logs import checkpoint_figures, rotations
from laminar_cluster.harness.producer import RECORD_PARTITIONS
from laminar_cluster.harness.workload import Workload, expected_aggregates
from laminar_cluster.runtime.output import committed_checkpoints, open_output_authority
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.probe import ProbeReport, probe_store_contract
from laminar_cluster.views.probe_report import print_report

SEED: Final = 7

PROBE_TIMEOUT_S: Final = 30.0

CHECK_TIMEOUT_S: Final = 300.0


def fresh_namespace(url: str) -> str:
    """`url` with a fresh path segment: an empty namespace of a shared store."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() == "memory":
        raise InvalidArgument(f"{url}: memory:// lives in one process; the nodes are processes")
    path = f"{parsed.path.rstrip('/')}/demo-{uuid.uuid4().hex[:12]}"
    return urllib.parse.urlunsplit(parsed._replace(path=path))


async def run_demo_scenario(
    url: str, workload: Workload, scratch: Path, view: DemoView, timings: NodeTimings
) -> tuple[dict[str, Any], bool]:
    clock = RealClock()
    store = open_store(url)
    figures: dict[str, Any] = {
        "store": url,
        "workload": _workload_json(workload),
        "job": JOB_PATH,
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
    return await check_job_exactly_once(
        store, clock, workload, deadline=deadline, expected=expected
    )


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
        "record_partitions": RECORD_PARTITIONS,
    }
