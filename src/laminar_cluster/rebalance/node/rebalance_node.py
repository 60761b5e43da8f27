"""`RebalanceNode`: one process's whole rebalance control plane (RB §1, RB §4.2, RB §4.17).

`run()` starts an incarnation: it acquires the node's process lease (a new boot and term),
activates it and reads the first membership view, each step retried on StoreUnavailable until
one startup deadline (`node_startup`; a first startup that cannot finish logs `startup_failed`
and exits 5), then runs until it leaves, is stopped or is fenced, in one TaskGroup:

* the process lease renewal (`membership.leave.keep_renewed`);
* the `StoreClusterController`'s discovery refresh every `poll_s`;
* leadership: `LeaderLeaseManager`s back to back while this node is a candidate
  (`node_leadership.leader_eligible`; a fenced manager is replaced by a new one, which begins
  a new term, LA-9);
* the `SnapshotWatcher` (followers and leader alike) and the `RebalanceLoop` (acts while leader;
  each attempt, `loop.rebalance_attempt`, runs the stopped-recovery round of RB §1.3 first while
  this process is recovering, holds `leader_work` and logs `rotated`);
* `LeaderDuties` (seed v1, periodic checkpoint) and the `NodeMonitor` (log events on state
  changes);
* graceful leave (`node_leave`, RB §4.17), once `request_leave()` is called (the CLI's
  SIGTERM/SIGINT): draining, drained, left, then stop (exit 0; exit 4 out of leave time).

A fenced incarnation (its lease lapsed, or was taken over) is followed by a new one once the
store answers (`rebalance.node.rejoin`: a new term, a cold engine), unless `exit_on_fence` or a
newer process holds the node id (exit 3). The factories below run once per incarnation.

By default the engine is the `BaseEngine` (no data plane) with a `LeaderCheckpointer`. A
runtime reuses this assembly without copying it (runtime.node.StreamNode does) through keyword
arguments:

* `engine_factory(clock, participant, checkpointer)`: the engine;
* `checkpointer_factory(decisions, authority, proof, owners_of)`: what `checkpoint_until` runs
  (the periodic checkpoint of `LeaderDuties` and the pre-rotation checkpoint of a rotation);
* `extra_tasks(ctx, shutdown)`: more long-running `(purpose, coroutine)` pairs started in the
  node's TaskGroup after the core tasks (their store requests counted under `purpose`; like
  every task, cancelled `tasks.SHUTDOWN_GRACE_S` after shutdown if still running);
* `store_wrapper(store)`: wraps the caller's store under the node's request counter (metrics);
* `metrics`: the `PlacementSink` the `SnapshotWatcher` publishes placement figures to;
* `restoring()`: the vnodes the engine still restores, for the report each process lease
  renewal carries (`membership.records.NodeReport`, with the request counts by kind and the
  engine's assignment version; none without it);
* `job_report()`: a job's late events and dead letters for that report (None: no job).

While a factory runs, `store`, `decisions` and `authority` are already set on the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Final

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import Clock
from laminar_cluster.errors import DeadlineExceeded, LaminarError, StoreUnavailable
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.manager import LeaseManagerConfig
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.membership.discovery import Discovery
from laminar_cluster.membership.leave import keep_renewed
from laminar_cluster.membership.process_lease import ProcessFenced, ProcessLeaseHolder
from laminar_cluster.membership.records import JobReport, NodeReport, node_report
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.handoff_checkpoint import (
    Checkpointer,
    LeaderCheckpointer,
    OwnersOf,
)
from laminar_cluster.rebalance.node.config import VNODE_COUNT_DEFAULT, NodeConfig
from laminar_cluster.rebalance.node.duties import LeaderDuties, SkipCheckpoint
from laminar_cluster.rebalance.node.idle import IdleAttempts, IdleKey
from laminar_cluster.rebalance.node.leadership import ManagedLeadership
from laminar_cluster.rebalance.node.leave import EXIT_LEAVE_TIMEOUT, EXIT_LEFT, GracefulLeave
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.loop import RebalanceLoop, logged_attempt
from laminar_cluster.rebalance.node.monitor import NodeMonitor
from laminar_cluster.rebalance.node.rejoin import Rejoiner
from laminar_cluster.rebalance.node.startup import acquire_lease, activate_lease, first_members
from laminar_cluster.rebalance.node.stats import PurposeCountingStore
from laminar_cluster.rebalance.node.tasks import (
    cancel_after_shutdown,
    counted_task,
    follow_candidacy,
)
from laminar_cluster.rebalance.watcher.publish import PlacementSink
from laminar_cluster.rebalance.watcher.snapshot_watcher import SnapshotWatcher
from laminar_cluster.store import ObjectStore

logger: Final = logging.getLogger(__name__)

EXIT_STOPPED: Final = 1  # stopped without leaving (a second signal)
EXIT_FENCED: Final = 3
EXIT_STARTUP_FAILED: Final = 5  # the startup deadline passed, or a store error no retry fixes
STARTUP_TIMEOUT_S: Final = 30.0

EngineFactory = Callable[[Clock, FenceParticipant, Checkpointer], BaseEngine]
CheckpointerFactory = Callable[
    [DecisionStore, LeaderLeaseStore, Callable[[], LeaderProof | None], OwnersOf], Checkpointer
]
# (purpose, work): one more long-running task of the node (module docstring).
NodeTask = tuple[str, Coroutine[Any, Any, None]]
ExtraTasks = Callable[[RebalanceContext, asyncio.Event], Iterable[NodeTask]]
StoreWrapper = Callable[[ObjectStore], ObjectStore]

__all__ = [
    "EXIT_FENCED",
    "EXIT_LEAVE_TIMEOUT",
    "EXIT_LEFT",
    "EXIT_STARTUP_FAILED",
    "EXIT_STOPPED",
    "VNODE_COUNT_DEFAULT",
    "CheckpointerFactory",
    "EngineFactory",
    "ExtraTasks",
    "NodeConfig",
    "NodeTask",
    "RebalanceNode",
    "StoreWrapper",
    "control_engine",
]


def control_engine(
    clock: Clock, participant: FenceParticipant, checkpointer: Checkpointer
) -> BaseEngine:
    return BaseEngine(clock=clock, participant=participant, checkpointer=checkpointer)


class RebalanceNode:
    """One node process's control plane over `store` (the caller opens and closes it)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        config: NodeConfig,
        log: NodeLog,
        *,
        engine_factory: EngineFactory = control_engine,
        checkpointer_factory: CheckpointerFactory = LeaderCheckpointer,
        extra_tasks: ExtraTasks | None = None,
        store_wrapper: StoreWrapper | None = None,
        metrics: PlacementSink | None = None,
        restoring: Callable[[], Iterable[int]] | None = None,
        job_report: Callable[[], JobReport | None] | None = None,
        skip_checkpoint: SkipCheckpoint | None = None,
    ) -> None:
        self.requests = PurposeCountingStore(
            store if store_wrapper is None else store_wrapper(store)
        )
        self._counting_since_s = clock.monotonic()
        self._restoring, self._skip_checkpoint = restoring, skip_checkpoint
        self._job_report = job_report
        self.store: ObjectStore = self.requests
        self.clock = clock
        self.config = config
        self.log = log
        self._engine_factory = engine_factory
        self._checkpointer_factory = checkpointer_factory
        self._extra_tasks = extra_tasks
        self.metrics = metrics
        self.shutdown = asyncio.Event()
        self.leave_requested = asyncio.Event()
        self._interrupted = asyncio.Event()  # a leave or a stop was asked for: never rejoin
        # Why the last incarnation was fenced, while the process waits to rejoin (`/readyz`).
        self.rejoining: str | None = None
        self._holders: list[ProcessLeaseHolder] = []
        self.leader_work = asyncio.Lock()
        self.exit_code = EXIT_STOPPED
        self.rotations = 0  # rotations this process settled as leader
        self._idle = IdleAttempts()  # skips leader attempts with nothing new to look at
        # Set by `run` once the lease is acquired (tests and the runtime read them).
        self.holder: ProcessLeaseHolder | None = None
        self.decisions: DecisionStore | None = None
        self.authority: LeaderLeaseStore | None = None
        self.controller: StoreClusterController | None = None
        self.leadership: ManagedLeadership | None = None
        self.engine: BaseEngine | None = None
        self.ctx: RebalanceContext | None = None
        self._duties: LeaderDuties | None = None

    def request_leave(self) -> None:
        """Leave gracefully (draining, drained, left), then stop; while rejoining after a
        fence, stop (there is nothing to drain)."""
        self.leave_requested.set()
        self._interrupted.set()

    def stop(self) -> None:
        """Stop now, without leaving: peers will see this node die after a ttl."""
        self.shutdown.set()
        self._interrupted.set()

    async def run(self) -> int:
        """Run until left (0), stopped (1), fenced (3: only with `exit_on_fence`, or when a
        newer process holds the node id), out of leave time (4) or unable to start (5: the
        startup deadline passed, or a store error that no retry fixes). A fenced incarnation
        is followed by a new one once the store answers (`rejoin`)."""
        fenced = await self._incarnation(first=True)
        rejoiner = Rejoiner(self.store, self.clock, self.config.node_id, self.log)
        while fenced is not None and self._may_rejoin():
            self.rejoining = fenced
            if not await rejoiner.wait(fenced, self._boots(), stop=self._interrupted):
                break
            self.rejoining = None
            fenced = await self._incarnation(first=False, attempts=rejoiner.attempts)
        self.rejoining = None
        self.log.write("stopped", exit_code=self.exit_code)
        return self.exit_code

    def _may_rejoin(self) -> bool:
        return not (self.config.exit_on_fence or self._interrupted.is_set())

    def _boots(self) -> set[str]:
        return {boot for holder in self._holders for boot in holder.boots}

    async def _incarnation(self, *, first: bool, attempts: int = 0) -> str | None:
        """One process incarnation: start, then the node's tasks until they end. Why it was
        fenced (exit code 3), or None when it ended otherwise. A later incarnation's startup
        that the store stopped (unavailable, deadline) counts as fenced: the wait goes on."""
        self.exit_code = EXIT_STOPPED
        fenced: str | None = None
        retried: tuple[type[LaminarError], ...] = (
            () if first else (StoreUnavailable, DeadlineExceeded)
        )
        try:
            holder, leadership, loop = await self._start()
        except ProcessFenced as error:
            fenced = str(error)
        except retried as error:
            fenced = f"startup failed: {type(error).__name__}: {error}"
        except LaminarError as error:
            self.log.write("startup_failed", kind=type(error).__name__, error=str(error))
            self.exit_code = EXIT_STARTUP_FAILED
            return None
        else:
            if not first:
                self.log.write("rejoined", term=holder.record.lease.term, attempts=attempts)
            try:
                await self._run_tasks(holder, leadership, loop)
            except* ProcessFenced as group:
                fenced = str(group.exceptions[0])
            except* Exception as group:
                self.log.write("crashed", error=repr(group.exceptions[0]))
                raise
        if fenced is not None:
            self.exit_code = EXIT_FENCED
            self.log.write("fenced", error=fenced, rejoin=self._may_rejoin())
        return fenced

    async def _start(self) -> tuple[ProcessLeaseHolder, ManagedLeadership, RebalanceLoop]:
        """Acquire and activate the process lease, assemble the control plane and read the
        first membership view, each store step retried on StoreUnavailable until one startup
        deadline (`node_startup`)."""
        config, clock = self.config, self.clock
        deadline = clock.monotonic() + STARTUP_TIMEOUT_S
        holder = ProcessLeaseHolder(
            self.store, clock, config.node_id, ttl_s=config.ttl_s, report=self._report
        )
        self.holder, self._duties = holder, None
        self._holders.append(holder)
        acquired = await acquire_lease(holder, clock, deadline=deadline)
        predecessor = acquired.predecessor
        self.log.write(
            "acquired",
            term=acquired.record.lease.term,
            boot=acquired.record.lease.owner,
            predecessor_term=None if predecessor is None else predecessor.lease.term,
        )
        await activate_lease(holder, clock, deadline=deadline)
        self.log.write("active", term=acquired.record.lease.term)
        leadership, loop = self._assemble(holder)
        self.leadership = leadership
        assert self.controller is not None
        await first_members(self.controller, clock, deadline=deadline)
        return holder, leadership, loop

    def _assemble(self, holder: ProcessLeaseHolder) -> tuple[ManagedLeadership, RebalanceLoop]:
        config, clock, store = self.config, self.clock, self.store
        boot, term = holder.record.lease.owner, holder.record.lease.term
        decisions = DecisionStore.shared(store, clock=clock)
        authority = LeaderLeaseStore(store, clock=clock, ttl_s=config.ttl_s, decisions=decisions)
        self.decisions, self.authority = decisions, authority
        snapshots = AssignmentSnapshotStore(store)
        owner = LeaderLeaseOwner(node=config.node_id, boot=boot, process_term=term)
        leadership = ManagedLeadership(
            authority,
            owner,
            LeaseManagerConfig(config.ttl_s, config.renew_interval_s, config.observe_interval_s),
            clock,
        )
        controller = StoreClusterController(
            store=store,
            clock=clock,
            node_id=config.node_id,
            holder=holder,
            discovery=Discovery(store, clock),
            authority=authority,
            snapshots=snapshots,
            leadership=leadership,
        )
        checkpointer = self._checkpointer_factory(
            decisions, authority, controller.capture_leader_proof, self._owners_of
        )
        self.engine = self._engine_factory(clock, controller.local_participant(), checkpointer)
        self.controller = controller
        self.ctx = RebalanceContext(
            controller=controller,
            engine=self.engine,
            snapshots=snapshots,
            config=config.rebalance_config(),
            vnode_count=config.vnode_count,
        )
        return leadership, RebalanceLoop(self.ctx, attempt=self._attempt)

    def _report(self) -> NodeReport:
        """What the next process lease write carries for operators (no store request)."""
        engine = self.engine
        host = None if engine is None else engine.host
        return node_report(
            self.requests.requests,
            self.clock.monotonic() - self._counting_since_s,
            0 if engine is None else engine.registry().version,
            () if self._restoring is None else self._restoring(),
            None if host is None else host.quiescent_through(),  # DC-21
            None if self._job_report is None else self._job_report(),
        )

    def _owners_of(self, fence: CheckpointAssignmentFence) -> Sequence[int] | None:
        """The owner map of `fence` when it is the version the local engine runs."""
        engine = self.engine
        if engine is None:
            return None
        registry = engine.registry()
        return registry.owners if registry.version == fence.assignment_version else None

    async def _attempt(self, ctx: RebalanceContext, live: Sequence[int]) -> int | None:
        """One `rebalance_attempt` (a stopped-recovery round while recovering, then
        `try_rebalance`) under `leader_work`, logged with its own store requests; nothing to do
        before the boot seed (`LeaderDuties` writes it), nor while nothing the last attempt
        that found nothing to do read has moved (`rebalance.node.idle`)."""
        if self._duties is None or not self._duties.seeded:
            return None
        async with self.leader_work:
            key = await self._idle_key(ctx, live)
            if key is not None and self._idle.skip(key):
                return None
            try:
                settled = await logged_attempt(ctx, live, self.log, self.requests)
            except LaminarError:
                self._idle.forget()
                raise
            self._idle.settled(key if ctx.attempt.idle else None, settled)
        self.rotations += settled is not None
        return settled

    def next_checkpoint_s(self) -> float | None:
        """When (monotonic) this node's next periodic checkpoint is due while it leads."""
        duties = self._duties
        return None if duties is None or not duties.seeded else duties.next_checkpoint_s

    async def _idle_key(self, ctx: RebalanceContext, live: Sequence[int]) -> IdleKey | None:
        """The idle key now, or None (the attempt runs) when it cannot be read."""
        controller = self.controller
        proof = None if controller is None else controller.capture_leader_proof()
        if controller is None or proof is None:
            return None
        try:
            return await self._idle.key(ctx, controller, proof, live)
        except LaminarError as error:
            logger.debug("idle check skipped (the attempt runs and reports it): %s", error)
            return None

    async def _run_tasks(
        self, holder: ProcessLeaseHolder, leadership: ManagedLeadership, loop: RebalanceLoop
    ) -> None:
        assert self.controller is not None and self.engine is not None and self.ctx is not None
        controller, engine, ctx, shutdown = self.controller, self.engine, self.ctx, self.shutdown
        duties = LeaderDuties(
            ctx, controller, engine, self.log, self.leader_work, self.config.checkpoint_interval_s
        )
        duties.skip_checkpoint = self._skip_checkpoint  # DC-21
        self._duties = duties
        monitor = NodeMonitor(
            self.log,
            controller,
            engine,
            leadership,
            self.requests,
            interval_s=self.config.monitor_interval_s or min(0.02, self.config.poll_s / 10),
            stats_interval_s=self.config.stats_interval_s,
        )
        watcher, poll_s = SnapshotWatcher(ctx, self.metrics), self.config.poll_s
        candidacy = follow_candidacy(
            controller, engine, leadership, poll_s=poll_s, shutdown=shutdown
        )
        work: list[tuple[str | None, Coroutine[Any, Any, None]]] = [
            ("lease", self._renew(holder)),
            ("membership", controller.run(shutdown, poll_s)),
            ("leadership", leadership.run(shutdown)),
            (None, candidacy),
            ("watcher", watcher.run(shutdown)),
            ("rebalance", loop.run(shutdown)),
            ("duties", duties.run(shutdown)),
            ("leave", self._leave_when_asked(holder)),
            (None, monitor.run(shutdown)),
        ]
        if self._extra_tasks is not None:
            work.extend(self._extra_tasks(ctx, shutdown))
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(job if purpose is None else counted_task(purpose, job))
                for purpose, job in work
            ]
            group.create_task(cancel_after_shutdown(tasks, self.clock, shutdown))

    async def _renew(self, holder: ProcessLeaseHolder) -> None:
        await keep_renewed(holder, self.clock, interval_s=self.config.renew_interval_s)

    async def _leave_when_asked(self, holder: ProcessLeaseHolder) -> None:
        """RB §4.17 graceful exit (`node_leave`), then shutdown."""
        assert self.ctx is not None and self.engine is not None
        leave = GracefulLeave(holder, self.clock, self.config, self.log, self.ctx, self.engine)
        exit_code = await leave.when_asked(self.leave_requested, self.shutdown)
        if exit_code is not None:
            self.exit_code = exit_code
            self.shutdown.set()
