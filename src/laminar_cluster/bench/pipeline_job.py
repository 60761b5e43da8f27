"""`laminar-cluster bench pipeline --job PATH`: a user's job (or a reference job) on node
processes against Bytewax 0.21 on the same workload, in the same run (issue 16 "What must
show").

Input: before any timing, the workload (`harness.workload`, seed 11) is written once as records
`{"key": k, "value": v, "ts_ms": t}` into a record log of `RECORD_PARTITIONS` partitions with
the public `Producer` (partitioned by key; `t` by the Bytewax peer's rule,
`harness.workload.event_time_ms` over the workload's partitions), and each node count runs on a
copy of that store. Nodes: `nodes` processes of `laminar-cluster node --job PATH
--checkpoint-interval 1 --close-idle-windows S` (S: 3 s, or longer for a larger workload),
timed as `bench pipeline` times them (`PipelineBench.process`: from the first node's activation
to the leader's log line of the first committed checkpoint whose source offsets cover every
event). Then, with the nodes still up,
the job's delivered output is read back from its sink files and checked against the
independent computation (`bench.job_output`; reference jobs only, a user's job reports
`verified: null`).

The reference jobs' peers are the same computations in Bytewax; a user's job has none.
Peer: Bytewax on the same workload written as JSON Lines (`bytewax_peer.measure_bytewax`) with
as many workers as nodes (2 nodes: 2 worker processes), recovery snapshots every second. Its
`events_per_s` counts its whole wall time, interpreter start included; `ratio` compares the
nodes with its `processing_events_per_s` (wall time less its start, the stricter figure) and
`ratio_wall` with the wall figure. Nothing here asserts a timing.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from laminar_cluster.bench import bytewax_peer
from laminar_cluster.bench.job_output import verify_reference_output
from laminar_cluster.bench.pipeline_run import TIMINGS, PipelineBench, file_url
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.harness.reference_jobs import REFERENCE_JOBS, expected_keyed_step
from laminar_cluster.harness.workload import Workload, expected_aggregates, record_chunks
from laminar_cluster.runtime.job_node import JobRuntime, load_job
from laminar_cluster.store import open_store
from laminar_cluster.views.output import console, print_json

SEED: Final = 11
RECORD_PARTITIONS: Final = 256
PRODUCER_FLUSH_EVENTS: Final = 65_536
CLOSE_IDLE_WINDOWS_S_MIN: Final = 3.0
# A vnode waits for its next batch while the others' are read and run (256 partitions of up
# to 8,192 events a read): its windows must not close as idle before its input ends.
CLOSE_IDLE_EVENTS_PER_S: Final = 200_000
VERIFY_TIMEOUT_S: Final = 120.0
REFERENCE_MODULE: Final = "laminar_cluster.harness.reference_jobs"
TARGET_RATIO_PER_NODE: Final = 1.2  # count_sum against Bytewax, one node to one worker
TARGET_STEP_EVENTS_PER_S: Final = 150_000  # keyed_step, per node


@dataclass(frozen=True, slots=True)
class JobChoice:
    """The job a bench runs: its name, its import path, and the reference it is (if any)."""

    name: str
    path: str
    reference: str | None  # a name in REFERENCE_JOBS, or None for a user's job


def resolve_job(spec: str) -> JobChoice:
    """A reference job's name, or `module:attribute` of a job a node can run
    (InvalidArgument, one line, otherwise)."""
    if spec in REFERENCE_JOBS:
        return JobChoice(spec, f"{REFERENCE_MODULE}:{spec}", spec)
    if ":" not in spec:
        raise InvalidArgument(
            f"--job {spec!r}: name a reference job ({', '.join(REFERENCE_JOBS)}) or "
            "module:attribute"
        )
    job = load_job(spec)
    JobRuntime.of(job)  # refuses a job a node cannot run, before anything starts
    return JobChoice(job.name, spec, None)


def expected_output(reference: str, workload: Workload) -> Any:
    """What reference job `reference` must deliver for `workload`."""
    if reference == "count_sum":
        return expected_aggregates(workload)
    if reference == "windowed":
        return bytewax_peer.expected_windows(workload)
    return expected_keyed_step(workload)


async def write_record_log(url: str, workload: Workload) -> float:
    """Write `workload` as records into the record log of the store at `url`; seconds."""
    clock = RealClock()
    started = clock.monotonic()
    store = open_store(url)
    try:
        async with Producer(
            store, partitions=RECORD_PARTITIONS, clock=clock, flush_events=PRODUCER_FLUSH_EVENTS
        ) as producer:
            for records in record_chunks(workload):
                for key, record in records:
                    await producer.send(key, record)
    finally:
        await store.close()
    return clock.monotonic() - started


def run_bench_pipeline_job(
    job: str,
    *,
    events: int = 1_000_000,
    partitions: int = 64,
    keys: int = 10_000,
    node_counts: tuple[int, ...] = (1,),
    fsync: bool = True,
    bytewax: bool = True,
) -> dict[str, Any]:
    """Every node count, each with its Bytewax peer; the figures, JSON-ready."""
    if not node_counts or min(node_counts) < 1:
        raise InvalidArgument(f"node counts must be >= 1, not {node_counts}")
    choice = resolve_job(job)
    workload = Workload(seed=SEED, events=events, partitions=partitions, keys=keys)
    expected = None if choice.reference is None else expected_output(choice.reference, workload)
    root = Path(tempfile.mkdtemp(prefix="laminar-bench-pipeline-job-"))
    try:
        template = root / "template"
        produce_s = asyncio.run(write_record_log(file_url(template, fsync), workload))
        runs = []
        for nodes in node_counts:
            figures = asyncio.run(_one(choice, nodes, workload, template, expected, fsync=fsync))
            _peer(figures, choice, workload, nodes, root, bytewax=bytewax)
            runs.append(figures)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "job": choice.name,
        "job_path": choice.path,
        "store": "file:// (a copy of the pre-written log per run"
        + ("" if fsync else ", no fsync")
        + ")",
        "nodes_run_as": "real processes (python -m laminar_cluster.cli node --job), this host",
        "workload": {
            "events": events,
            "partitions": partitions,
            "keys": keys,
            "seed": SEED,
            "record_partitions": RECORD_PARTITIONS,
        },
        "produce_s": round(produce_s, 3),
        "checkpoint_interval_s": TIMINGS.checkpoint_interval_s,
        "runs": runs,
        "target": _target(choice, runs),
    }


async def _one(
    choice: JobChoice,
    nodes: int,
    workload: Workload,
    template: Path,
    expected: Any,
    *,
    fsync: bool,
) -> dict[str, Any]:
    clock = RealClock()
    scratch = template.parent / f"nodes-{nodes}"
    shutil.copytree(template, scratch / "store")
    store = open_store(file_url(scratch / "store", fsync))
    idle_s = max(CLOSE_IDLE_WINDOWS_S_MIN, workload.events / CLOSE_IDLE_EVENTS_PER_S)
    node_args = ["--job", choice.path, "--close-idle-windows", str(idle_s)]
    try:
        with NodeFleet(file_url(scratch / "store", fsync), scratch, TIMINGS) as fleet:
            bench = PipelineBench(store, clock, fleet)
            run = await bench.process(nodes, workload.events, node_args)
            figures = run.as_json()
            figures["verified"], figures["verification"] = None, "a user's job: not checked"
            if choice.reference is not None:
                verified, detail = await verify_reference_output(
                    store, clock, choice.reference, expected, timeout_s=VERIFY_TIMEOUT_S + idle_s
                )
                figures["verified"], figures["verification"] = verified, detail
        return figures
    finally:
        await store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _peer(
    figures: dict[str, Any],
    choice: JobChoice,
    workload: Workload,
    nodes: int,
    root: Path,
    *,
    bytewax: bool,
) -> None:
    """Measure Bytewax with `nodes` workers on the reference job's peer flow; the ratios."""
    figures["bytewax"] = figures["ratio"] = figures["ratio_wall"] = None
    if not bytewax or choice.reference is None:
        return
    peer = bytewax_peer.measure_bytewax(
        workload, job=cast(bytewax_peer.Job, choice.reference), workers=nodes, tmp=root
    )
    figures["bytewax"] = {**peer.as_json(), "processing_events_per_s": peer.processing_per_s}
    figures["ratio"], figures["ratio_wall"] = peer.ratios(figures["events_per_s"])


def _target(choice: JobChoice, runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    one = next((run for run in runs if run["nodes"] == 1), None)
    if choice.reference == "count_sum":
        met = None if one is None or one["ratio"] is None else one["ratio"] >= TARGET_RATIO_PER_NODE
        return {"what": f"one node >= {TARGET_RATIO_PER_NODE}x one Bytewax worker", "met": met}
    if choice.reference == "keyed_step":
        met = None if one is None else one["events_per_s"] >= TARGET_STEP_EVENTS_PER_S
        return {"what": f"one node >= {TARGET_STEP_EVENTS_PER_S:,} events/s", "met": met}
    return None


def print_pipeline_job(figures: dict[str, Any], *, as_json: bool) -> None:
    """The figures as JSON, or a line per node count: the nodes, Bytewax, the ratio."""
    if as_json:
        print_json(figures)
        return
    workload = figures["workload"]
    console.print(
        f"job {figures['job']} ({figures['job_path']}): {workload['events']:,} events, "
        f"{workload['keys']:,} keys, written in {figures['produce_s']} s to a record log of "
        f"{workload['record_partitions']} partitions on {figures['store']}; checkpoint every "
        f"{figures['checkpoint_interval_s']} s",
        soft_wrap=True,
    )
    for run in figures["runs"]:
        peer = run["bytewax"]
        versus = (
            "Bytewax not measured"
            if peer is None
            else f"Bytewax {peer['workers']} worker(s): {peer['processing_events_per_s']:,} "
            f"events/s ({peer['events_per_s']:,} with its start), verified {peer['verified']}; "
            f"ratio {run['ratio']}x ({run['ratio_wall']}x)"
        )
        console.print(
            f"  {run['nodes']} node(s): {run['events_per_s']:>9,} events/s committed "
            f"({run['process_s']:.2f} s, {run['checkpoints']['committed']} checkpoints), "
            f"verified {run['verified']} ({run['verification']}); {versus}",
            soft_wrap=True,
        )
    target = figures["target"]
    if target is not None:
        console.print(f"  target {target['what']}: {target['met']}")
