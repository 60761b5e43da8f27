"""The demo's scenario: real stream nodes running a job on one store, a workload, a join, a
SIGKILLed leader and a graceful leave, until every event is committed (issue 7 "The main job and
the views"; issue 16: "The reference count/sum becomes one job written with this API, and the
demo runs it").

The nodes run the reference job `count_sum` (`harness.reference_jobs`, written with the public
job API: count and sum per key) with `--job JOB_PATH`. The workload goes into a record log of
`producer.RECORD_PARTITIONS` partitions as records `{"key", "value", "ts_ms"}` through the
public `Producer`, let through in quarters by the gated producer (`producer.GatedRecords`), so
each change lands while events flow.

Phases (each bounded by `PHASE_TIMEOUT_S`, off file:// `REMOTE_PHASE_TIMEOUT_S`):

1. start nodes 1, 2, 3 and wait until all run the seeded assignment and one leads;
2. let the first quarter through; wait for a committed checkpoint that holds events;
3. start node 4 with the second quarter; wait until every live node runs an assignment in which
   node 4 owns vnodes (a graceful rotation: drain, pre-rotation checkpoint, handoff);
4. let the third quarter through, and once half of it is in the log SIGKILL the leader; wait
   for the first commit whose fence no longer names the killed boot (failover and recovery);
5. let the rest through, and once half of it is in the log SIGTERM a follower; wait until it
   has left (exit 0);
6. wait until the last committed checkpoint's source offsets add up to the whole workload (a
   record log's offsets count events, so they do; that checkpoint's output holds the job's
   flush of every key's final count and sum).

Progress comes from the store (the status view, read every `STATUS_EVERY_S`) and from the
nodes' JSON-lines logs; nothing is asked of a node. A node exiting that the scenario did not
stop, or a phase passing its timeout, fails the run with the nodes' log tails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.errors import DeadlineExceeded, LaminarError
from laminar_cluster.harness.demo_view import DemoView
from laminar_cluster.harness.fleet import (
    STREAM_NODE_TIMINGS,
    NodeFleet,
    NodeTimings,
    Run,
)
from laminar_cluster.harness.pipeline_logs import (
    KillFigures,
    adopted_version,
    kill_figures,
    leader_run,
    owned_vnodes,
)
from laminar_cluster.harness.producer import GatedRecords
from laminar_cluster.harness.workload import Workload
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.status import StatusReader, StatusView, event_log_opener

TIMINGS: Final = STREAM_NODE_TIMINGS
# A remote store (S3 and the like) answers in tens of milliseconds, not a few, and every
# request counts: more slack, and fewer polls. A checkpoint writes one state object and one
# manifest per node whatever the vnodes (distributed-checkpoint.md "Cost"; with layout 1 it wrote
# and read back one partial per vnode, about 530 requests for 256); the idle engine reads each
# owned partition's index every `source_idle_s`. The checkpoint pointer keeps the node's default
# `checkpoint_poll_s` (0.05 s): participants poll that fast only around an expected prepare and
# after a cluster change (DC-18), and that is what makes a checkpoint fast; with 0.25 s (set when
# participants listed `checkpoints/` every poll) a prepare after a rotation or a failover was
# noticed up to a second late.
REMOTE_TIMINGS: Final = dataclasses.replace(
    TIMINGS,
    ttl_s=10.0,
    poll_s=1.0,
    debounce_s=1.0,
    checkpoint_interval_s=4.0,
    drain_ack_timeout_s=30.0,
    retry_delay_s=1.0,
    checkpoint_timeout_s=45.0,
    prepare_timeout_s=30.0,
    decision_timeout_s=60.0,
    source_idle_s=0.5,
    leave_timeout_s=120.0,
    stats_interval_s=5.0,  # `requests` log events: what a slow run spent its requests on
)
JOB_PATH: Final = "laminar_cluster.harness.reference_jobs:count_sum"
NODE_ARGS: Final = ("--job", JOB_PATH)
FIRST_NODES: Final = (1, 2, 3)
JOINER: Final = 4
POLL_S: Final = 0.1
STATUS_EVERY_S: Final = 0.5
REMOTE_STATUS_EVERY_S: Final = 2.0
STATUS_TIMEOUT_S: Final = 10.0
PHASE_TIMEOUT_S: Final = 90.0
REMOTE_PHASE_TIMEOUT_S: Final = 150.0  # above REMOTE_TIMINGS.leave_timeout_s
PRODUCE_TIMEOUT_S: Final = 600.0

Condition = Callable[[], Awaitable[bool]]


@dataclass
class Marks:
    """When things happened (the Clock's monotonic seconds) and to whom."""

    started: float
    produce_started: float | None = None
    produced_all: float | None = None
    first_commit: float | None = None
    join_started: float | None = None
    joined: float | None = None
    killed: Run | None = None
    killed_at: float | None = None
    kill: KillFigures | None = None
    leaver: Run | None = None
    leave_started: float | None = None
    left: float | None = None
    all_committed: float | None = None
    stopped_by_us: list[Run] = field(default_factory=list)


def is_local(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme.lower() == "file"


def timings_for(url: str) -> NodeTimings:
    """The node timings for a store: `TIMINGS` on file://, `REMOTE_TIMINGS` elsewhere."""
    return TIMINGS if is_local(url) else REMOTE_TIMINGS


class DemoScenario:
    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        fleet: NodeFleet,
        workload: Workload,
        view: DemoView,
    ) -> None:
        self.store, self.clock, self.fleet = store, clock, fleet
        self.workload, self.view = workload, view
        self.log = GatedRecords(store, clock=clock)
        self.reader = StatusReader(store, clock, event_log_opener(clock))
        self.marks = Marks(started=clock.monotonic())
        self.committed = 0
        self.status: StatusView | None = None
        self._next_status_s = 0.0
        # A status read lists every partition's log: fewer of them on a remote store.
        self._status_every_s = STATUS_EVERY_S if is_local(store.url) else REMOTE_STATUS_EVERY_S
        self._phase_timeout_s = PHASE_TIMEOUT_S if is_local(store.url) else REMOTE_PHASE_TIMEOUT_S

    async def run(self) -> Marks:
        """The whole scenario; the first LaminarError of the producer or the scenario is
        raised as itself (not inside an ExceptionGroup)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._produce())
                await self._scenario()
        except* LaminarError as group_error:
            raise group_error.exceptions[0] from None
        return self.marks

    async def _produce(self) -> None:
        deadline = self.clock.monotonic() + PRODUCE_TIMEOUT_S
        await self.log.produce(self.workload, deadline=deadline)
        self.marks.produced_all = self.clock.monotonic()

    def _share(self, quarters: int) -> int:
        return self.workload.events * quarters // 4

    async def _scenario(self) -> None:
        marks, fleet = self.marks, self.fleet
        self._phase(f"starting nodes {', '.join(map(str, FIRST_NODES))}")
        for node in FIRST_NODES:
            fleet.start(node, NODE_ARGS)
        await self._wait("the first nodes run the seeded assignment under a leader", self._seeded)

        self._phase(f"producing {self.workload.events:,} events in quarters; the first one now")
        marks.produce_started = self.clock.monotonic()
        await self.log.allow(self._share(1))
        await self._wait("a committed checkpoint holding events", self._has_commit)
        marks.first_commit = self.clock.monotonic()

        self._phase(f"node {JOINER} joins (graceful rotation) while the second quarter flows")
        await self.log.allow(self._share(2))
        marks.join_started = self.clock.monotonic()
        fleet.start(JOINER, NODE_ARGS)
        await self._wait(f"every node runs an assignment giving node {JOINER} vnodes", self._joined)
        marks.joined = self.clock.monotonic()

        await self.log.allow(self._share(3))
        await self._wait("half the third quarter in the log", self._produced(5, 8))
        await self._kill_leader()

        await self.log.allow(self.workload.events)
        await self._wait("half the last quarter in the log", self._produced(7, 8))
        await self._leave_one()

        self._phase("waiting until every event is committed")
        await self._wait("every event committed", self._all_committed)
        marks.all_committed = self.clock.monotonic()
        self._phase(f"all {self.workload.events:,} events committed")

    async def _kill_leader(self) -> None:
        marks = self.marks
        leader = leader_run(self.fleet)
        if leader is None:
            raise DeadlineExceeded(f"no leader to kill\n{self.fleet.tail(20)}")
        marks.stopped_by_us.append(leader)
        marks.killed, marks.killed_at = leader, self.clock.monotonic()
        self.fleet.signal(leader.node, signal.SIGKILL)
        self._phase(
            f"SIGKILLed the leader, node {leader.node}, mid-stream; waiting for a new leader "
            f"and a commit that covers its vnodes"
        )
        await self._wait("a commit covering the killed leader's vnodes", self._recovered)
        kill = marks.kill
        assert kill is not None and kill.recovery_s is not None
        self.view.say(
            f"         new leader after {kill.new_leader_s or 0:.2f} s; its first commit after "
            f"{kill.failover_s or 0:.2f} s; the killed node's vnodes committed by others after "
            f"{kill.recovery_s:.2f} s (assignment v{kill.recovery_version})"
        )

    async def _leave_one(self) -> None:
        marks = self.marks
        leader = leader_run(self.fleet)
        followers = [run for run in self.fleet.live_runs() if run is not leader]
        if not followers:
            raise DeadlineExceeded(f"no follower to stop\n{self.fleet.tail(20)}")
        leaver = min(followers, key=lambda run: run.node)
        marks.stopped_by_us.append(leaver)
        marks.leaver, marks.leave_started = leaver, self.clock.monotonic()
        self.fleet.signal(leaver.node, signal.SIGTERM)
        self._phase(f"SIGTERMed node {leaver.node}: it drains its vnodes to the others and leaves")
        await self._wait(f"node {leaver.node} left", self._exited(leaver))
        marks.left = self.clock.monotonic()
        code = leaver.process.returncode
        if code != 0:
            raise DeadlineExceeded(
                f"node {leaver.node} exited {code} after SIGTERM, not 0 (left)\n{self.fleet.tail()}"
            )
        self.view.say(
            f"         node {leaver.node} left after {marks.left - marks.leave_started:.2f} s"
        )

    # -- conditions -------------------------------------------------------------------------

    async def _seeded(self) -> bool:
        """Every first node runs an assignment (a node the seed missed gets its vnodes in a
        later rotation) and one of them leads."""
        runs = self.fleet.live_runs()
        return (
            len(runs) == len(FIRST_NODES)
            and all(adopted_version(run) >= 1 for run in runs)
            and any(owned_vnodes(run) > 0 for run in runs)
            and leader_run(self.fleet) is not None
        )

    async def _joined(self) -> bool:
        joiner = self.fleet.current(JOINER)
        if joiner is None or owned_vnodes(joiner) == 0:
            return False
        version = adopted_version(joiner)
        return all(adopted_version(run) >= version for run in self.fleet.live_runs())

    def _produced(self, numerator: int, denominator: int) -> Condition:
        target = self.workload.events * numerator // denominator

        async def produced() -> bool:
            return self.log.appended >= target or self.marks.produced_all is not None

        return produced

    @staticmethod
    def _exited(run: Run) -> Condition:
        async def exited() -> bool:
            return not run.alive

        return exited

    async def _recovered(self) -> bool:
        marks = self.marks
        assert marks.killed is not None and marks.killed_at is not None
        marks.kill = await kill_figures(self.store, self.fleet, marks.killed, marks.killed_at)
        return marks.kill.recovery_s is not None

    async def _has_commit(self) -> bool:
        return self.committed > 0

    async def _all_committed(self) -> bool:
        return self.marks.produced_all is not None and self.committed >= self.workload.events

    # -- the loop ---------------------------------------------------------------------------

    def _phase(self, text: str) -> None:
        self.view.elapsed_s = self.clock.monotonic() - self.marks.started
        self.view.set_phase(text)

    async def _wait(self, what: str, condition: Condition) -> None:
        """Refresh logs and the status view until `condition` holds; DeadlineExceeded with the
        nodes' log tails after the phase timeout or when a node exits on its own."""
        clock = self.clock
        deadline = clock.monotonic() + self._phase_timeout_s
        while True:
            self.fleet.refresh()
            await self._observe()
            if await condition():
                return
            self._check_crashes(what)
            if clock.monotonic() >= deadline:
                raise DeadlineExceeded(
                    f"demo: {what}: not reached in {self._phase_timeout_s:.0f} s\n"
                    f"{self.fleet.tail(30)}"
                )
            await clock.sleep(POLL_S)

    async def _observe(self) -> None:
        now = self.clock.monotonic()
        if now >= self._next_status_s:
            self._next_status_s = now + self._status_every_s
            self.status = await self.reader.read(timeout_s=STATUS_TIMEOUT_S)
            checkpoint = self.status.checkpoint
            if checkpoint is not None:
                self.committed = max(self.committed, int(checkpoint["committed_events"]))
        self.view.update(
            elapsed_s=now - self.marks.started,
            produced=self.log.appended,
            committed=self.committed,
            status=self.status,
        )

    def _check_crashes(self, what: str) -> None:
        for run in self.fleet.runs:
            if not run.alive and all(run is not stopped for stopped in self.marks.stopped_by_us):
                raise DeadlineExceeded(
                    f"demo: node {run.node} exited {run.process.returncode} on its own while "
                    f"waiting for: {what}\n{self.fleet.tail(30)}"
                )
