"""`laminar-cluster bench cost --store URL [--json]`: what a cluster costs in store requests
(issue 15 "Store economy"), idle and busy, priced at S3 list prices.

It refuses a store that holds anything (it starts nodes 1..3 on it), declares the event log's
partitions (256 by default: partition p feeds vnode p % 256, so every vnode is stateful), then
starts 3 real `laminar-cluster node` processes (`harness.fleet.NodeFleet`) with the node
command's own default timings, except the checkpoint interval (10 s by default) and a
`requests` log event every `STATS_INTERVAL_S`, plus any `--node-option`. Once every node runs
the seeded assignment and a checkpoint committed after that, it measures:

* **idle**: `--idle-s` seconds with no event appended (the log declared, every partition caught
  up);
* **busy**: `--busy-s` seconds while a producer in this process appends the deterministic
  workload (`harness.workload`, seed 15) at `--events-per-s`, one segment holding a batch of
  every partition each `--batch-s` seconds, so every vnode's state changes between two checkpoints.

Each node counts its own requests by purpose and kind (`rebalance.node.stats`) and logs the
cumulative counters as `requests` events, which cost no request; a phase's counts of a node are
the difference of its first event at or after the phase's start and its last one at or before
the end, over that node's own window. `cost_figures` turns them into requests per second by
kind and protocol, the price per node and month, and the requests per committed checkpoint (the
leader's `checkpoint` events in the phase). The producer's own requests are reported apart:
they are the workload's, not the cluster's. Nothing here asserts a timing.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from laminar_cluster.bench.cost_figures import (
    NodeWindow,
    Prices,
    difference,
    phase_figures,
    targets,
)
from laminar_cluster.clock import Clock, RealClock, within_deadline
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_segments import SEGMENT_EVENTS_MAX
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument
from laminar_cluster.harness.fleet import Event, NodeFleet, Run
from laminar_cluster.harness.pipeline_logs import events_of
from laminar_cluster.harness.workload import Workload, chunks
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.counting import CountingStore

STATS_INTERVAL_S: Final = 0.5
SETTLE_TIMEOUT_S: Final = 300.0
STEP_TIMEOUT_S: Final = 60.0
POLL_S: Final = 0.2
SEED: Final = 15
KEYS: Final = 10_000


@dataclass(frozen=True, slots=True)
class CostPlan:
    """What `bench cost` runs (seconds; module docstring)."""

    idle_s: float = 60.0
    busy_s: float = 60.0
    checkpoint_interval_s: float = 10.0
    partitions: int = 256
    events_per_s: int = 1_000
    batch_s: float = 5.0
    nodes: int = 3
    prices: Prices = field(default_factory=Prices)
    node_options: tuple[str, ...] = ()  # more `laminar-cluster node` flags, e.g. ("--ttl", "10")

    def __post_init__(self) -> None:
        for name in ("idle_s", "busy_s", "checkpoint_interval_s", "batch_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgument(f"bench cost: {name} must be > 0, not {value!r}")
        if self.events_per_s < 1 or self.partitions < 1 or self.nodes < 1:
            raise InvalidArgument("bench cost: events per second, partitions and nodes are >= 1")

    def options(self) -> list[str]:
        """The node flags every node of the bench gets."""
        return [
            *("--checkpoint-interval", str(self.checkpoint_interval_s)),
            *("--stats-interval", str(STATS_INTERVAL_S)),
            *self.node_options,
        ]

    def workload(self) -> Workload:
        rounds = math.ceil(self.busy_s / self.batch_s) + 2
        return Workload(
            seed=SEED, events=self.per_round() * rounds, partitions=self.partitions, keys=KEYS
        )

    def per_round(self) -> int:
        return max(1, round(self.events_per_s * self.batch_s))


def run_bench_cost(store_url: str, plan: CostPlan) -> dict[str, Any]:
    """Both phases on `store_url` (which must be empty); the figures, JSON-ready."""
    return asyncio.run(_bench(store_url, plan))


async def _bench(store_url: str, plan: CostPlan) -> dict[str, Any]:
    clock = RealClock()
    store = open_store(store_url)
    scratch = Path(tempfile.mkdtemp(prefix="laminar-bench-cost-"))
    try:
        await _require_empty(store, clock)
        producer = Producer(CountingStore(store), clock, plan)
        await producer.declare()
        with NodeFleet(store_url, scratch, None) as fleet:
            bench = _Phases(fleet, clock, plan)
            settle_s = await bench.settle()
            idle = await bench.measure("idle", plan.idle_s)
            async with asyncio.TaskGroup() as group:
                group.create_task(producer.run())
                busy = await bench.measure("busy", plan.busy_s)
                producer.stop()
        return {
            "store": store.url,
            "nodes": plan.nodes,
            "node_options": plan.options(),
            "timings": "the node command's defaults, except the node options listed",
            "prices": plan.prices.as_json(),
            "settle_s": round(settle_s, 3),
            "workload": {
                "partitions": plan.partitions,
                "events_per_s": plan.events_per_s,
                "batch_s": plan.batch_s,
                "keys": KEYS,
                "seed": SEED,
            },
            "idle": idle,
            "busy": {**busy, "producer": producer.figures()},
            "targets": targets(idle, busy, plan.nodes),
        }
    finally:
        await store.close()
        shutil.rmtree(scratch, ignore_errors=True)


async def _require_empty(store: ObjectStore, clock: Clock) -> None:
    """One LIST: the bench starts nodes 1..N, which would fence a running cluster's nodes."""
    async with within_deadline(clock, clock.monotonic() + STEP_TIMEOUT_S, "bench cost: listing"):
        found = await store.list("", limit=1)
    if found:
        raise InvalidArgument(
            f"{store.url}: bench cost needs an empty store (it holds {found[0].key})"
        )


def _rounds(workload: Workload, per_round: int) -> Iterator[dict[int, tuple[list[int], list[int]]]]:
    """The workload's events in stream order, `per_round` at a time, grouped by partition."""
    batch: dict[int, tuple[list[int], list[int]]] = {}
    held = 0
    for chunk in chunks(workload):
        for partition, key, value in zip(chunk.partitions, chunk.keys, chunk.values, strict=True):
            keys, values = batch.setdefault(partition, ([], []))
            keys.append(key)
            values.append(value)
            held += 1
            if held == per_round:
                yield batch
                batch, held = {}, 0
    if batch:
        yield batch


def _segments(
    batch: dict[int, tuple[list[int], list[int]]],
) -> Iterator[dict[int, tuple[list[int], list[int]]]]:
    """A round's batches as segments of at most SEGMENT_EVENTS_MAX events (normally one)."""
    segment: dict[int, tuple[list[int], list[int]]] = {}
    held = 0
    for partition, (keys, values) in sorted(batch.items()):
        if segment and held + len(keys) > SEGMENT_EVENTS_MAX:
            yield segment
            segment, held = {}, 0
        segment[partition] = (keys, values)
        held += len(keys)
    if segment:
        yield segment


class Producer:
    """Appends the workload a round every `batch_s`: one segment holding a batch of each
    partition that has events in the round (all of them, at the bench's rates), until
    stopped."""

    def __init__(self, store: CountingStore, clock: Clock, plan: CostPlan) -> None:
        self.store, self.clock, self.plan = store, clock, plan
        self.log = EventLog(store, clock=clock)
        self.events = self.batches = self.rounds = 0
        self.started_s = self.ended_s = 0.0
        self._stop = asyncio.Event()

    async def declare(self) -> None:
        deadline = self.clock.monotonic() + STEP_TIMEOUT_S
        await self.log.declare_partitions(self.plan.partitions, deadline=deadline)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        plan, clock = self.plan, self.clock
        self.started_s = clock.monotonic()
        for index, batch in enumerate(_rounds(plan.workload(), plan.per_round())):
            try:
                async with clock.timeout_at(self.started_s + index * plan.batch_s):
                    await self._stop.wait()
            except TimeoutError:
                pass
            if self._stop.is_set():
                break
            deadline = clock.monotonic() + STEP_TIMEOUT_S
            for segment in _segments(batch):
                await self.log.append_batches(segment, deadline=deadline)
                self.events += sum(len(keys) for keys, _ in segment.values())
                self.batches += len(segment)
            self.rounds += 1
        self.ended_s = clock.monotonic()

    def figures(self) -> dict[str, Any]:
        """What the producer did (its requests are the workload's, not the cluster's)."""
        span_s = max(self.ended_s - self.started_s, 1e-9)
        return {
            "rounds": self.rounds,
            "events": self.events,
            "batches": self.batches,
            "events_per_s": round(self.events / span_s, 1),
            "requests": dict(sorted(self.store.requests.items())),
        }


class _Phases:
    """The fleet's start, settling and measured phases."""

    def __init__(self, fleet: NodeFleet, clock: Clock, plan: CostPlan) -> None:
        self.fleet, self.clock, self.plan = fleet, clock, plan

    async def wait(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        """Refresh the logs and call `check()` until it holds; no node may exit."""

        async def holds() -> bool:
            return check()

        await self.fleet.until(
            f"bench cost: {what}", holds, clock=self.clock, timeout_s=timeout_s, poll_s=POLL_S
        )

    async def settle(self) -> float:
        """Start the nodes; wait until every one runs the same assignment and a checkpoint
        committed after the last of them installed it. Seconds taken."""
        started_s = self.clock.monotonic()
        for node in range(1, self.plan.nodes + 1):
            self.fleet.start(node, self.plan.options())
        await self.wait(
            "the nodes running one assignment and a commit", self._settled, SETTLE_TIMEOUT_S
        )
        return self.clock.monotonic() - started_s

    def _settled(self) -> bool:
        runs = self.fleet.runs
        activated = [_last(run, "activated") for run in runs]
        if any(event is None for event in activated):
            return False
        versions = {int(event["version"]) for event in activated if event is not None}
        if len(versions) != 1:
            return False
        last_s = max(float(event["t_mono"]) for event in activated if event is not None)
        return any(float(e["t_mono"]) > last_s for _, e in events_of(runs, "checkpoint"))

    async def measure(self, name: str, duration_s: float) -> dict[str, Any]:
        """The phase's figures over `duration_s` from now (`cost_figures.phase_figures`)."""
        start_s = self.clock.monotonic()
        await self.clock.sleep(duration_s)
        end_s = self.clock.monotonic()
        await self.wait(
            f"every node's requests after the {name} phase",
            lambda: all(_stats_at_or_after(run, end_s) is not None for run in self.fleet.runs),
            STEP_TIMEOUT_S,
        )
        windows = [_window(run, start_s, end_s) for run in self.fleet.runs]
        commits = [
            e
            for _, e in events_of(self.fleet.runs, "checkpoint")
            if start_s <= e["t_mono"] <= end_s
        ]
        figures = phase_figures(windows, self.plan.prices, checkpoints=len(commits))
        return {"phase": name, "duration_s": round(end_s - start_s, 3), **figures}


def _last(run: Run, name: str) -> Event | None:
    found = [event for event in run.events if event["event"] == name]
    return found[-1] if found else None


def _stats_at_or_after(run: Run, at_s: float) -> Event | None:
    return next(
        (e for e in run.events if e["event"] == "requests" and float(e["t_mono"]) >= at_s), None
    )


def _window(run: Run, start_s: float, end_s: float) -> NodeWindow:
    """The run's counts from its first `requests` event at or after `start_s` to its last at or
    before `end_s`."""
    first = _stats_at_or_after(run, start_s)
    last = None
    for event in run.events:
        if event["event"] == "requests" and float(event["t_mono"]) <= end_s:
            last = event
    if first is None or last is None or float(last["t_mono"]) <= float(first["t_mono"]):
        raise DeadlineExceeded(f"bench cost: node {run.node} logged no requests in the phase")
    return NodeWindow(
        node=run.node,
        window_s=float(last["t_mono"]) - float(first["t_mono"]),
        counts=difference(last["counts"], first["counts"]),
        objects=difference(last.get("objects", {}), first.get("objects", {})),
    )
