"""`StreamNode`: a node process with a data plane on (issue 7 "A node process"; RB §1, RB §4.2,
RB §4.17; DC §1.7, DC §1.9, DC §3; docs/protocols/distributed-checkpoint.md; docs/embedding.md).

It is a `rebalance.node.rebalance_node.RebalanceNode`
(process lease, membership, leadership, watcher,
rebalance loop, leader duties, graceful leave: unchanged) assembled through its hooks:

* engine: a `BaseEngine` running the data plane `data_plane(store, clock)` builds (by default
  the reference `StreamEngine` over the store's `EventLog` with the `KeyedAggregation`
  processor), restoring newly owned vnodes through `CheckpointRestorer` (the node's own
  decision store and leader authority);
* checkpointer: the coordinator's `ClusterCheckpointer`, so the leader's periodic checkpoint
  (`LeaderDuties`, every `checkpoint_interval_s`) and the pre-rotation checkpoint of a rotation
  are real distributed checkpoints (prepare, state objects, manifests, capsule, outcome); its
  collection aborts as soon as the node's membership view holds a participant that has not
  acked lost (`lost_participants`: suspected, dead, left, or another boot; DC-19);
* extra tasks: the engine's host (`engine`: the plane's processing and the host's restores),
  the `CheckpointParticipant` answering prepares of the fence this process runs through the
  engine's host (`participant`; the leader is a participant too; it polls the checkpoint
  pointer around the expected prepares, from `checkpoint_interval_s`),
  and the observer (`observer`): every `poll_s` the metrics' `update_from` (local state only)
  and the rotations this node settled; every `lag_every_polls` polls `update_lag_from` (reads
  the log ends, bounded); every `progress_log_s` a `progress` log event when the engine's
  figures moved;
* metrics (optional, any `StreamMetrics`, e.g. `metrics.NodeMetrics`): the watcher's placement
  sink, every checkpoint this node leads counted with its duration and verdict, rotations.
  The store wrapper that counts requests (`metrics.MetricsStore`) is the caller's to pass.

The layer order puts `metrics` above `runtime`, so this module names what it needs from metrics
as a Protocol; the CLI builds the `NodeMetrics`, its store wrapper and its HTTP endpoint.
An empty event log just idles: the engine waits for the log's declared partitions.
`run` first refuses a store of the old checkpoint layout (`coordinator.layout`), before anything
is written.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.clock import Clock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.coordinator.participant import CheckpointParticipant
from laminar_cluster.coordinator.quiet import QuietCheckpoints
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.membership.discovery import MembershipView
from laminar_cluster.membership.records import JobReport
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.data_plane import DataPlane
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer, OwnersOf
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import (
    NodeConfig,
    NodeTask,
    RebalanceNode,
    StoreWrapper,
)
from laminar_cluster.rebalance.watcher.publish import PlacementSink
from laminar_cluster.runtime.checkpoint_guards import check_checkpoint_layout, lost_participants
from laminar_cluster.runtime.checkpoint_restorer import CheckpointRestorer
from laminar_cluster.runtime.counted import CountedCheckpointer, CountedRestorer
from laminar_cluster.runtime.engine import EngineView, StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.job_node import JobRuntime, discover_files
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import ObjectStore

logger: Final = logging.getLogger(__name__)

LAG_TIMEOUT_S_MAX: Final = 10.0
# The `progress` figures whose change is worth a log line.
MOVED_FIGURES: Final = (
    "events",
    "owned",
    "restoring",
    "paused_partitions",
    "aborts",
    "restores",
    "errors",
)


# The data plane of a node: built once the node's store and clock are known.
PlaneFactory = Callable[[ObjectStore, Clock], DataPlane]


class StreamMetrics(PlacementSink, Protocol):
    """What a `StreamNode` reports to (`metrics.NodeMetrics` is one)."""

    def update_from(self, controller: StoreClusterController, engine: EngineView) -> None: ...

    async def update_lag_from(self, engine: EngineView, *, deadline: float) -> int: ...

    def checkpoint_finished(self, duration_s: float, verdict: CheckpointVerdict | None) -> None: ...

    def rotated(self) -> None: ...

    def engine_bug(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StreamNodeConfig:
    """The data plane's settings (seconds); the control plane's are the `NodeConfig`."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    checkpoint_poll_s: float = 0.05  # participant's prepare/decision poll, leader's ack poll
    prepare_timeout_s: float = 10.0  # participant: cut and writes of one attempt
    decision_timeout_s: float = 30.0  # participant: one wait for an attempt's outcome
    lag_every_polls: int = 5  # source lag (reads the log ends) every this many polls
    progress_log_s: float = 2.0  # a `progress` event at most this often (0: never)

    def __post_init__(self) -> None:
        for name in ("checkpoint_poll_s", "prepare_timeout_s", "decision_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgument(f"stream node config: {name} must be > 0, not {value!r}")
        if self.lag_every_polls < 1:
            raise InvalidArgument(
                f"stream node config: lag_every_polls must be >= 1, not {self.lag_every_polls}"
            )
        if not (math.isfinite(self.progress_log_s) and self.progress_log_s >= 0):
            raise InvalidArgument(
                f"stream node config: progress_log_s must be >= 0, not {self.progress_log_s!r}"
            )


class StreamNode:
    """One node process with a data plane (default: the reference engine) over `store` (the
    caller opens and closes it); `run`, `request_leave` and `stop` are the `RebalanceNode`'s."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        config: NodeConfig,
        log: NodeLog,
        *,
        stream: StreamNodeConfig | None = None,
        metrics: StreamMetrics | None = None,
        store_wrapper: StoreWrapper | None = None,
        data_plane: PlaneFactory | None = None,
        job: JobRuntime | None = None,
    ) -> None:
        self.stream = stream or StreamNodeConfig()
        self.metrics = metrics
        self.log = log
        self.job = job
        if job is not None:
            job.on_fatal = lambda error: self.stop()  # the job cannot go on (job_processor)
        self._plane_factory = data_plane or self._stream_engine
        self._inner: ClusterCheckpointer | None = None
        self._proof: Callable[[], LeaderProof | None] = lambda: None
        self.engine: EngineView | None = None
        self.participant: CheckpointParticipant | None = None
        self.checkpoints: Counter[str] = Counter()  # calls this node led, by verdict/"failed"
        self.quiet: QuietCheckpoints | None = None  # DC-21, once the checkpointer is built
        self.node = RebalanceNode(
            store,
            clock,
            config,
            log,
            engine_factory=self._engine,
            checkpointer_factory=self._checkpointer,
            extra_tasks=self._tasks,
            store_wrapper=store_wrapper,
            metrics=metrics,
            restoring=self._restoring,
            job_report=self._job_report,
            skip_checkpoint=self._skip_checkpoint,
        )

    @property
    def leave_requested(self) -> asyncio.Event:
        return self.node.leave_requested

    async def run(self) -> int:
        """Run until left (0), stopped (1), fenced (3) or out of leave time (4); a store of the
        old checkpoint layout is InvalidArgument before anything is written."""
        await check_checkpoint_layout(self.node.store, self.node.clock)
        return await self.node.run()

    def request_leave(self) -> None:
        self.node.request_leave()

    def stop(self) -> None:
        self.node.stop()

    # -- RebalanceNode hooks -------------------------------------------------------------------
    def _restoring(self) -> tuple[int, ...]:
        engine = self.engine
        return () if engine is None else tuple(engine.host.restoring)

    def _job_report(self) -> JobReport | None:
        """A job's late events and dead letters for the lease renewal's report (no request)."""
        engine = self.engine
        if self.job is None or engine is None:
            return None
        progress = engine.progress()
        return JobReport(late_events=progress.late_events, dead_letters=progress.dead_letters)

    def _stream_engine(self, store: ObjectStore, clock: Clock) -> DataPlane:
        """The default data plane: the job's (`JobRuntime.plane`), else the reference engine
        over the store's event log."""
        if self.job is not None:
            return self.job.plane(store, clock, self.stream.engine)
        return StreamEngine(
            clock=clock,
            log=EventLog(store, clock=clock),
            processor=KeyedAggregation(),
            config=self.stream.engine,
        )

    def _engine(
        self, clock: Clock, participant: FenceParticipant, checkpointer: Checkpointer
    ) -> BaseEngine:
        node = self.node
        if node.decisions is None or node.authority is None:
            raise AssertionError("the node builds its authority before its engine")
        view = embed_plane(
            clock=clock,
            participant=participant,
            plane=self._plane_factory(node.store, clock),
            restorer=CountedRestorer(
                CheckpointRestorer(node.store, node.decisions, node.authority)
            ),
            config=self.stream.engine,
            checkpointer=checkpointer,
        )
        self.engine = view
        return view.engine

    def _checkpointer(
        self,
        decisions: DecisionStore,
        authority: LeaderLeaseStore,
        proof: Callable[[], LeaderProof | None],
        owners_of: OwnersOf,
    ) -> Checkpointer:
        inner = ClusterCheckpointer(
            decisions,
            authority,
            proof,
            owners_of,
            poll_s=self.stream.checkpoint_poll_s,
            lost=self._lost_participants,
            pointed=self._wake_participant,
            next_prepare=self.node.next_checkpoint_s,
        )
        self._inner, self._proof = inner, proof
        self.quiet = QuietCheckpoints(
            lambda: inner.quiet_basis, proof, self._quiescent_through, self._membership_view
        )
        return CountedCheckpointer(inner, authority.clock, self._checkpoint_finished)

    def _wake_participant(self) -> None:
        """The leader here wrote the checkpoint pointer: our participant reads it now."""
        if self.participant is not None:
            self.participant.wake()

    def _members_version(self) -> int:
        """The membership view's version (0 before the controller runs)."""
        controller = self.node.controller
        return 0 if controller is None else controller.members_watch().version()

    def _membership_view(self) -> MembershipView | None:
        controller = self.node.controller
        return None if controller is None else controller.membership_view()

    def _lost_participants(self, fence: CheckpointAssignmentFence) -> frozenset[int]:
        """DC-19: the participants of `fence` this node's membership view holds lost."""
        view = self._membership_view()
        if view is None:
            return frozenset()
        return lost_participants(view, fence, self.node.config.node_id)

    def _quiescent_through(self) -> int | None:
        engine = self.engine
        return None if engine is None else engine.host.quiescent_through()

    def _skip_checkpoint(self, fence: CheckpointAssignmentFence) -> bool:
        """DC-21: the leader's periodic checkpoint under `fence` is not needed now."""
        return self.quiet is not None and self.quiet.skip(fence)

    def _checkpoint_finished(self, duration_s: float, verdict: CheckpointVerdict | None) -> None:
        self.checkpoints["failed" if verdict is None else verdict.value] += 1
        deliverer = None if self.job is None else self.job.deliverer
        last = None if self._inner is None else self._inner.last
        if deliverer is not None and last is not None and verdict is CheckpointVerdict.COMMIT:
            deliverer.committed(last.checkpoint_id)
        if self.metrics is not None:
            self.metrics.checkpoint_finished(duration_s, verdict)

    def _tasks(self, ctx: RebalanceContext, shutdown: asyncio.Event) -> list[NodeTask]:
        engine = self.engine
        if engine is None:
            raise AssertionError("the node builds its engine before its tasks")
        stream = self.stream
        participant = CheckpointParticipant(
            self.node.store,
            ctx.clock,
            ctx.authority,
            engine.host,
            stream.checkpoint_poll_s,
            interval_s=self.node.config.checkpoint_interval_s,
            prepare_timeout_s=stream.prepare_timeout_s,
            decision_timeout_s=stream.decision_timeout_s,
            on_engine_bug=None if self.metrics is None else self.metrics.engine_bug,
            members_version=self._members_version,
        )
        self.participant = participant
        observer = _Observer(self, engine)
        tasks: list[NodeTask] = [
            ("engine", engine.host.run(shutdown)),
            ("participant", participant.run(shutdown)),
            ("observer", observer.run(shutdown)),
        ]
        if self.job is not None:
            deliverer = self.job.open_deliverer(
                self.node.store, ctx.authority, lambda: self._proof() is not None
            )
            if deliverer is not None:
                tasks.append(("delivery", deliverer.run(shutdown)))
            files, splits = self.job.file_source, self.job.splits
            if files is not None and splits is not None:
                leading = lambda: self._proof() is not None  # noqa: E731
                tasks.append(("discovery", discover_files(files, splits, leading, shutdown)))
        return tasks


@dataclass(slots=True)
class _Observer:
    """The `observer` task (module docstring): metrics per poll, lag every few polls, and
    `progress` log events."""

    owner: StreamNode
    engine: EngineView
    _rotations: int = 0
    _next_progress_s: float = 0.0
    _shown: tuple[int, ...] = ()

    async def run(self, shutdown: asyncio.Event) -> None:
        node = self.owner.node
        clock, poll_s = node.clock, node.config.poll_s
        every = self.owner.stream.lag_every_polls
        polls = 0
        while not shutdown.is_set():
            next_s = clock.monotonic() + poll_s
            self.observe()
            if polls % every == 0:
                await self.measure_lag(clock.monotonic() + min(every * poll_s, LAG_TIMEOUT_S_MAX))
            polls += 1
            try:
                async with clock.timeout_at(next_s):
                    await shutdown.wait()
            except TimeoutError:
                pass
        self.observe()

    def observe(self) -> None:
        """Local state only: metrics gauges, rotations, the progress event."""
        owner, node = self.owner, self.owner.node
        metrics, controller = owner.metrics, node.controller
        if metrics is not None and controller is not None:
            metrics.update_from(controller, self.engine)
            for _ in range(node.rotations - self._rotations):
                metrics.rotated()
        self._rotations = node.rotations
        self._progress()

    async def measure_lag(self, deadline: float) -> None:
        metrics = self.owner.metrics
        if metrics is None:
            return
        try:
            await metrics.update_lag_from(self.engine, deadline=deadline)
        except LaminarError as error:  # the next measurement retries; the gauge keeps its value
            logger.info("source lag not measured: %s", error)

    def _progress(self) -> None:
        owner = self.owner
        interval_s, clock = owner.stream.progress_log_s, owner.node.clock
        if interval_s <= 0 or clock.monotonic() < self._next_progress_s:
            return
        self._next_progress_s = clock.monotonic() + interval_s
        progress = self.engine.progress()
        figures: dict[str, Any] = {
            "events": progress.events_processed,
            "owned": progress.owned_vnodes,
            "restoring": progress.restoring_vnodes,
            "paused_partitions": progress.paused_partitions,
            "cuts": progress.cuts,
            "commits": progress.commits,
            "aborts": progress.aborts,
            "restores": progress.restores,
            "errors": progress.errors,
            "led": dict(sorted(owner.checkpoints.items())),
        }
        if owner.job is not None:  # a job's late events and dead letters (job_processor)
            figures.update(late_events=progress.late_events, dead_letters=progress.dead_letters)
        # Checkpoints alone (cuts, commits, led) do not make an idle node log every interval.
        moved = tuple(figures[k] for k in MOVED_FIGURES)
        if moved == self._shown:
            return
        self._shown = moved
        holding = progress.holding_cut
        owner.log.write(
            "progress",
            **figures,
            holding_cut=None if holding is None else holding.epoch,
            last_error=progress.last_error,
        )
