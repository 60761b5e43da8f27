"""One run of `bench pipeline`: N stream node processes working off a pre-produced event log on
a fresh file:// store, then (optionally) a SIGKILL of a follower while more events arrive.

Throughput: the whole workload is appended before any node starts, so the nodes see a full
backlog. The window runs from the first `activated` event of any node (the seeded assignment
installed: processing may begin) to the leader's `checkpoint` event of the first committed
checkpoint whose source offsets cover every event (found by walking the committed capsules
back from the last). Events per second = events / window: committed, exactly-once throughput,
checkpoint pauses included.

Checkpoints: the leader's `checkpoint` / `checkpoint_failed` events in the window, durations
(prepare to recorded outcome) p50/p99. Store requests per checkpoint: every node's request
counters (`requests` events, by the purpose of the task that made them) over the window:
`duties` (the leader's checkpointer) plus `participant` (pointer polls, cuts, state objects,
manifests, decision reads), divided by the checkpoints committed in the window; the
same with every request (log reads, renewals, discovery, watcher) as `all_requests`.

Recovery: with 2 or more nodes, the workload is extended by a quarter and a follower (a node
that is not the leader) is SIGKILLed once half of the extension is in the log; recovery time =
kill to the first commit whose fence no longer names the killed boot (`pipeline_logs`).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from laminar_cluster.authority.cluster_outcome_reads import cluster_outcomes
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import Clock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.errors import DeadlineExceeded
from laminar_cluster.harness.fleet import STREAM_NODE_TIMINGS, NodeFleet, Run
from laminar_cluster.harness.pipeline_logs import (
    adopted_version,
    checkpoint_figures,
    events_of,
    kill_figures,
    leader_run,
    recovery_timeline,
    rotations,
)
from laminar_cluster.harness.workload import Progress, Workload, produce
from laminar_cluster.runtime.output import open_output_authority
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.status import StatusReader, event_log_opener

TIMINGS: Final = dataclasses.replace(STREAM_NODE_TIMINGS, stats_interval_s=0.25)


def file_url(directory: Path, fsync: bool) -> str:
    """The file:// URL of a bench's scratch store in `directory` (`fsync=false` unless
    `fsync`)."""
    return f"file://{directory}" + ("" if fsync else "?fsync=false")


POLL_S: Final = 0.1
STEP_TIMEOUT_S: Final = 180.0
CHECKPOINT_PURPOSES: Final = ("purpose.duties", "purpose.participant")


@dataclass
class PipelineRun:
    """The figures of one run (JSON-ready through `as_json`)."""

    nodes: int
    events: int
    figures: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "events": self.events, **self.figures}


class PipelineBench:
    def __init__(self, store: ObjectStore, clock: Clock, fleet: NodeFleet) -> None:
        self.store, self.clock, self.fleet = store, clock, fleet
        self.reader = StatusReader(store, clock, event_log_opener(clock))

    async def produce(self, workload: Workload, *, progress: Progress | None = None) -> float:
        """Append `workload` (resuming); seconds taken."""
        started = self.clock.monotonic()
        await produce(
            EventLog(self.store, clock=self.clock),
            workload,
            batch_events=5_000,
            deadline=started + STEP_TIMEOUT_S,
            progress=progress,
        )
        return self.clock.monotonic() - started

    async def wait(self, what: str, condition: Callable[[], Awaitable[bool]]) -> None:
        """Refresh the logs and call `condition()` (async) until it holds; a node may exit
        only by our SIGKILL."""
        await self.fleet.until(
            f"bench pipeline: {what}",
            condition,
            clock=self.clock,
            timeout_s=STEP_TIMEOUT_S,
            may_exit=lambda run: run.process.returncode == -signal.SIGKILL,
            poll_s=POLL_S,
        )

    async def committed(self) -> int:
        view = await self.reader.read(timeout_s=10.0)
        return 0 if view.checkpoint is None else int(view.checkpoint["committed_events"])

    async def throughput(self, nodes: int, workload: Workload) -> PipelineRun:
        """Append `workload`, then time `nodes` nodes processing it (`process`)."""
        produce_s = round(await self.produce(workload), 3)
        run = await self.process(nodes, workload.events)
        run.figures = {"produce_s": produce_s, **run.figures}
        return run

    async def process(self, nodes: int, events: int, node_args: Sequence[str] = ()) -> PipelineRun:
        """Start `nodes` nodes (with `node_args`) on the log already holding `events` events;
        time them until a committed checkpoint covers every event (module docstring)."""
        run = PipelineRun(nodes=nodes, events=events)
        started = time.monotonic()
        for node in range(1, nodes + 1):
            self.fleet.start(node, node_args)

        async def done() -> bool:
            return await self.committed() >= events

        await self.wait(f"{events:,} events committed by {nodes} nodes", done)
        self.fleet.refresh()
        activated = [e for _, e in events_of(self.fleet.runs, "activated")]
        begin = float(activated[0]["t_mono"])
        end = await self._covering_commit_at(events)
        window_s = end - begin
        logged = checkpoint_figures(self.fleet.runs, since=begin)
        run.figures.update(
            {
                "start_to_processing_s": round(begin - started, 3),
                "process_s": round(window_s, 3),
                "events_per_s": round(events / max(window_s, 1e-9)),
                "seeded_nodes": len(_seed_nodes(self.fleet)),
                "rotations": len(rotations(self.fleet.runs)),
                "checkpoints": logged,
                **self._requests_per_checkpoint(begin, end, logged["committed"]),
            }
        )
        return run

    async def recovery(self, workload: Workload, extended: Workload) -> dict[str, Any]:
        """Extend the log to `extended`, SIGKILL a follower mid-way, time the recovery."""

        async def a_follower_owns() -> bool:  # a fast run can end before the rebalance does
            leader = leader_run(self.fleet)
            return leader is not None and any(
                r is not leader and _owns(r) for r in self.fleet.live_runs()
            )

        await self.wait("a follower that owns vnodes", a_follower_owns)
        leader = leader_run(self.fleet)
        followers = [r for r in self.fleet.live_runs() if r is not leader and _owns(r)]
        if leader is None or not followers:
            raise DeadlineExceeded(f"bench pipeline: no follower to kill\n{self.fleet.tail(20)}")
        victim = max(followers, key=lambda r: r.node)
        half = workload.events + (extended.events - workload.events) // 2
        killed: list[float] = []

        def kill_at_half(written: int, total: int) -> None:
            if written >= half and not killed:
                killed.append(self.clock.monotonic())
                self.fleet.signal(victim.node, signal.SIGKILL)

        await self.produce(extended, progress=kill_at_half)
        if not killed:
            raise DeadlineExceeded("bench pipeline: the extension ended before the kill")
        figures: dict[str, Any] = {"killed_node": victim.node, "leader": leader.node}

        async def recovered() -> bool:
            kill = await kill_figures(self.store, self.fleet, victim, killed[0])
            figures["recovery_s"] = None if kill.recovery_s is None else round(kill.recovery_s, 3)
            figures["recovery_fence_version"] = kill.recovery_version
            return kill.recovery_s is not None

        await self.wait(f"a commit covering node {victim.node}'s vnodes", recovered)
        self.fleet.refresh()
        version = figures["recovery_fence_version"]
        figures.update(recovery_timeline(self.fleet, victim, killed[0], version))

        async def done() -> bool:
            return await self.committed() >= extended.events

        await self.wait(f"all {extended.events:,} events committed after the kill", done)
        figures["events_after_kill"] = extended.events - half
        return figures

    def _deadline(self) -> float:
        return self.clock.monotonic() + STEP_TIMEOUT_S

    async def _covering_commit_at(self, events: int) -> float:
        """When the leader logged the first commit whose capsule covers `events` events."""
        authority = open_output_authority(self.store, self.clock)
        decisions: DecisionStore = authority.require_decisions()
        first_epoch: int | None = None
        for outcome in reversed(await cluster_outcomes(authority)):
            if not outcome.is_commit() or outcome.recovery_capsule is None:
                continue
            capsule = await decisions.load_recovery_capsule(outcome.recovery_capsule)
            if sum(capsule.source_offsets.values()) < events:
                break
            first_epoch = outcome.epoch
        logged = [
            e for _, e in events_of(self.fleet.runs, "checkpoint") if e["epoch"] == first_epoch
        ]
        if (
            not logged
        ):  # a pre-rotation checkpoint is not logged as `checkpoint`: now is an upper bound
            return self.clock.monotonic()
        return float(logged[0]["t_mono"])

    def _requests_per_checkpoint(self, begin: float, end: float, commits: int) -> dict[str, Any]:
        checkpoint = total = 0
        for run in self.fleet.runs:
            checkpoint += sum(
                _count_at(run, end, p) - _count_at(run, begin, p) for p in CHECKPOINT_PURPOSES
            )
            total += _count_at(run, end, "total") - _count_at(run, begin, "total")
        per = max(commits, 1)
        return {
            "store_requests_per_checkpoint": round(checkpoint / per, 1),
            "all_requests_per_checkpoint": round(total / per, 1),
        }


def _owns(run: Run) -> bool:
    adopted = [e for e in run.events if e["event"] == "adopted"]
    return bool(adopted) and int(adopted[-1]["vnodes"]) > 0 and adopted_version(run) > 0


def _seed_nodes(fleet: NodeFleet) -> list[int]:
    seeded = [e for _, e in events_of(fleet.runs, "seeded")]
    return [] if not seeded else [int(n) for n in seeded[0]["nodes"]]


def _count_at(run: Run, at: float, name: str) -> int:
    """The run's counter `name` as last logged at or before `at` (0 before any)."""
    count = 0
    for event in run.events:
        if event["event"] == "requests" and event["t_mono"] <= at:
            count = int(event.get(name, 0))
    return count
