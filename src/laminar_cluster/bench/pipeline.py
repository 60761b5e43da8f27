"""`laminar-cluster bench pipeline [--json]`: the data plane end to end with real node processes
on file:// (issue 7 "What must show": events per second for 1, 2 and 4 nodes, target at least
200,000 events per second for one node; checkpoint duration p50/p99; store requests per
checkpoint; recovery time after a SIGKILL, from the kill to the first commit that includes
the lost vnodes).

Each node count runs on its own fresh store with the same pre-produced workload
(`bench_pipeline_run` says how each figure is measured). After the largest run (when it has 2
or more nodes) the workload is extended by a quarter and a follower is SIGKILLed halfway
through the extension. Every run ends with the exactly-once check of its committed output
(`demo_check`); a failed check is reported in `exactly_once` (the figures are printed anyway).
Nothing here asserts a timing.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

from laminar_cluster.bench.pipeline_run import TIMINGS, PipelineBench, PipelineRun, file_url
from laminar_cluster.clock import RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.harness.exactly_once import check_exactly_once
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.harness.workload import Aggregates, Workload, expected_aggregates
from laminar_cluster.store import open_store
from laminar_cluster.views.output import console, print_json

NODE_COUNTS: Final = (1, 2, 4)
SEED: Final = 11
TARGET_ONE_NODE_EVENTS_PER_S: Final = 200_000
CHECK_TIMEOUT_S: Final = 300.0


def run_bench_pipeline(
    *,
    events: int = 1_000_000,
    partitions: int = 64,
    keys: int = 10_000,
    node_counts: tuple[int, ...] = NODE_COUNTS,
    fsync: bool = True,
) -> dict[str, Any]:
    """Every run, then the recovery measurement; the figures, JSON-ready."""
    if not node_counts or min(node_counts) < 1:
        raise InvalidArgument(f"node counts must be >= 1, not {node_counts}")
    workload = Workload(seed=SEED, events=events, partitions=partitions, keys=keys)
    extended = Workload(seed=SEED, events=events + events // 4, partitions=partitions, keys=keys)
    expected: dict[int, Aggregates] = {}
    runs: list[dict[str, Any]] = []
    recovery: dict[str, Any] | None = None
    last = node_counts[-1]
    for index, nodes in enumerate(node_counts):
        measure_recovery = index == len(node_counts) - 1 and last >= 2
        figures, kill = asyncio.run(
            _one(nodes, workload, extended if measure_recovery else None, expected, fsync=fsync)
        )
        runs.append(figures)
        recovery = kill if kill is not None else recovery
    one = next((run for run in runs if run["nodes"] == 1), None)
    return {
        "store": "file:// (a fresh temporary directory per run"
        + ("" if fsync else ", no fsync")
        + ")",
        "nodes_run_as": "real processes (python -m laminar_cluster.cli node), this host",
        "workload": {"events": events, "partitions": partitions, "keys": keys, "seed": SEED},
        "timings_s": {
            "checkpoint_interval": TIMINGS.checkpoint_interval_s,
            "ttl": TIMINGS.ttl_s,
            "poll": TIMINGS.poll_s,
            "debounce": TIMINGS.debounce_s,
        },
        "runs": runs,
        "recovery": recovery,
        "target_one_node_events_per_s": TARGET_ONE_NODE_EVENTS_PER_S,
        "meets_target": None
        if one is None
        else one["events_per_s"] >= TARGET_ONE_NODE_EVENTS_PER_S,
    }


async def _one(
    nodes: int,
    workload: Workload,
    extended: Workload | None,
    expected: dict[int, Aggregates],
    *,
    fsync: bool,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    clock = RealClock()
    scratch = Path(tempfile.mkdtemp(prefix=f"laminar-bench-pipeline-{nodes}-"))
    url = file_url(scratch / "store", fsync)
    store = open_store(url)
    try:
        with NodeFleet(url, scratch, TIMINGS) as fleet:
            bench = PipelineBench(store, clock, fleet)
            run: PipelineRun = await bench.throughput(nodes, workload)
            kill = None if extended is None else await bench.recovery(workload, extended)
        final = workload if extended is None else extended
        if final.events not in expected:
            expected[final.events] = await asyncio.to_thread(expected_aggregates, final)
        check = await check_exactly_once(
            store,
            clock,
            final,
            deadline=clock.monotonic() + CHECK_TIMEOUT_S,
            expected=expected[final.events],
        )
        run.figures["exactly_once"] = check.passed
        if not check.passed:
            run.figures["exactly_once_detail"] = check.describe()
        return run.as_json(), kill
    finally:
        await store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def print_pipeline(figures: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print_json(figures)
        return
    workload = figures["workload"]
    console.print(
        f"{workload['events']:,} events, {workload['partitions']} partitions, "
        f"{workload['keys']:,} keys on {figures['store']}; checkpoint every "
        f"{figures['timings_s']['checkpoint_interval']} s"
    )
    for run in figures["runs"]:
        cp = run["checkpoints"]
        console.print(
            f"  {run['nodes']} node(s): {run['events_per_s']:>9,} events/s committed "
            f"({run['process_s']:.2f} s); checkpoints {cp['committed']} "
            f"(+{cp['failed']} failed), p50 {cp['duration_p50_s']} s, p99 "
            f"{cp['duration_p99_s']} s; {run['store_requests_per_checkpoint']} checkpoint "
            f"store requests per checkpoint ({run['all_requests_per_checkpoint']} all); "
            f"exactly once: {run['exactly_once']}",
            soft_wrap=True,
        )
    recovery = figures["recovery"]
    if recovery is not None:
        console.print(
            f"  recovery: follower node {recovery['killed_node']} SIGKILLed; seen dead after "
            f"{recovery['seen_dead_s']} s, recovery assignment v"
            f"{recovery['recovery_fence_version']} rotated after "
            f"{recovery['recovery_rotated_s']} s, running everywhere after "
            f"{recovery['all_running_s']} s; its vnodes in a committed checkpoint after "
            f"{recovery['recovery_s']} s",
            soft_wrap=True,
        )
    console.print(
        f"  one node meets the {figures['target_one_node_events_per_s']:,} events/s target: "
        f"{figures['meets_target']}"
    )
