"""`NodeMetrics`: the Prometheus metrics of one node process (issue 7 `--metrics-port`;
RB §3.4 and RB §6.5 for the placement series).

Every instance owns a `CollectorRegistry` (never prometheus_client's global one), so several
nodes in one process (tests, simulations) never share or collide on series. The node updates it
three ways:

* `update_from(controller, engine)` every poll, from local state only: leadership and fencing
  token from the controller's leader proof, assignment version and vnodes owned from the
  engine's registry, and, when the engine reports `progress()`, vnodes restoring and events
  processed; `update_lag_from(engine, deadline=)` less often, since the lag reads the log ends;
* event calls where things happen: `checkpoint_finished`, `rotated`, `events_processed`,
  `set_source_lag`, `commit_seen`, `engine_bug` (the checkpoint participant caught an engine
  exception that is not a LaminarError: a bug, logged with its traceback);
* `MetricsStore` (metrics.counted_store) counts every store request and error through
  `store_request` / `store_error`; the watcher publishes placement through `publish_placement`
  (it is the rebalance layer's `PlacementSink`).

Names follow the Prometheus conventions: every series starts with `laminar_` (the placement
series are RB §3.4's `placement_vnodes_per_domain` and
`placement_blast_radius_ratio` under that prefix), counters end in `_total` (prometheus_client
appends it to a Counter's name), and a unit ends the name where there is one (`_seconds`,
`_events`). `laminar_last_commit_age_seconds` is computed at scrape time on the metrics' clock:
the monotonic seconds since this process last saw a cluster checkpoint commit (it led one, or
its engine committed its cut of one), held at 0 while the engine offers `quiescent_through()`
and it names a checkpoint: nothing here is left to commit, so an idle cluster whose leader
skips its checkpoints (distributed-checkpoint.md DC-21) does not look stalled; NaN before the
first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from laminar_cluster.assignment.placement import PlacementMetrics
from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.rebalance.interfaces import RegistrySnapshot

STORE_OPS: Final = ("get", "head", "put", "list", "delete")
# The `outcome` of a checkpoint that ended without a recorded verdict (refused, timed out).
CHECKPOINT_FAILED: Final = "failed"
CHECKPOINT_DURATION_BUCKETS_S: Final = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class MetricsController(Protocol):
    """What `update_from` reads from a `StoreClusterController` (which satisfies it)."""

    @property
    def node_id(self) -> int: ...

    def capture_leader_proof(self) -> LeaderProof | None: ...


class MetricsEngine(Protocol):
    """What `update_from` needs from any engine (the rebalance `BaseEngine` has only this).
    An engine with a data plane may also offer `progress()`, whose result carries
    `events_processed` (cumulative) and `restoring_vnodes` (a count): `update_from` reads them
    when present (runtime.engine.StreamEngine)."""

    def registry(self) -> RegistrySnapshot: ...


class LagSource(Protocol):
    """An engine that can measure its source lag (runtime.engine.StreamEngine): events
    behind the log's end per consumed partition. It reads the store, so it is not per poll."""

    async def source_lag(self, *, deadline: float) -> Mapping[int, int]: ...


class NodeMetrics:
    """The series of one node process, on `self.registry`."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, clock: Clock | None = None
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True) if registry is None else registry
        self.clock = RealClock() if clock is None else clock
        self._last_commit_s: float | None = None
        self._commits_seen = 0
        r = self.registry
        self.leader = Gauge("laminar_leader", "1 while this process leads, else 0", registry=r)
        self.leader_token = Gauge(
            "laminar_leader_fencing_token",
            "Fencing token of this process's leader term (0 while not leading)",
            registry=r,
        )
        self.assignment_version = Gauge(
            "laminar_assignment_version", "Assignment version the local engine runs", registry=r
        )
        self.vnodes_owned = Gauge(
            "laminar_vnodes_owned", "Vnodes this process owns in its assignment", registry=r
        )
        self.vnodes_restoring = Gauge(
            "laminar_vnodes_restoring", "Owned vnodes still restoring their state", registry=r
        )
        self.checkpoint_duration = Histogram(
            "laminar_checkpoint_duration_seconds",
            "Cluster checkpoint duration, by outcome (commit, abort, failed)",
            ["outcome"],
            buckets=CHECKPOINT_DURATION_BUCKETS_S,
            registry=r,
        )
        self.checkpoint_outcomes = Counter(
            "laminar_checkpoint_outcomes",
            "Cluster checkpoint verdicts recorded by this process",
            ["verdict"],
            registry=r,
        )
        self.rotations = Counter(
            "laminar_rotations", "Assignment rotations settled by this process", registry=r
        )
        self.events = Counter(
            "laminar_events_processed", "Events processed by the local engine", registry=r
        )
        self.engine_bugs = Counter(
            "laminar_engine_bugs",
            "Engine exceptions that are not LaminarErrors (bugs); each aborted its checkpoint",
            registry=r,
        )
        self.source_lag = Gauge(
            "laminar_source_lag_events",
            "Events between the log ends and the consumed offsets (NaN: unknown)",
            registry=r,
        )
        self._define_store_and_placement(r)
        self._define_job(r)
        for op in STORE_OPS:  # every operation's series exists from the start, at 0
            self.store_requests.labels(op=op)
        for verdict in CheckpointVerdict:
            self.checkpoint_outcomes.labels(verdict=verdict.value)
        self.source_lag.set(math.nan)
        self._events_seen = 0

    def _define_job(self, r: CollectorRegistry) -> None:
        self.job_late_events = Gauge(
            "laminar_job_late_events",
            "A job's events too late for their windows, in the vnodes this node holds",
            registry=r,
        )
        self.job_dead_letters = Gauge(
            "laminar_job_dead_letters",
            "A job's dead letters (unparseable events, raising steps), in the vnodes held",
            registry=r,
        )

    def _define_store_and_placement(self, r: CollectorRegistry) -> None:
        """The store, placement and last-commit series (part of `__init__`)."""
        self.store_requests = Counter(
            "laminar_store_requests", "Object store requests, by operation", ["op"], registry=r
        )
        self.store_errors = Counter(
            "laminar_store_errors",
            "Failed object store requests, by operation and exception class",
            ["op", "kind"],
            registry=r,
        )
        self.placement_vnodes = Gauge(
            "laminar_placement_vnodes_per_domain",
            "Vnodes per failure domain at the isolation tier (RB §3.4)",
            ["domain"],
            registry=r,
        )
        self.placement_blast_radius = Gauge(
            "laminar_placement_blast_radius_ratio",
            "Largest failure domain's share of the vnodes (RB §3.4)",
            registry=r,
        )
        self.last_commit_age = Gauge(
            "laminar_last_commit_age_seconds",
            "Seconds since this process last saw a cluster checkpoint commit, 0 while nothing "
            "here is left to commit (quiescent through its last; NaN: none yet)",
            registry=r,
        )
        self.last_commit_age.set_function(self._last_commit_age_s)

    # -- gauges ------------------------------------------------------------------------------
    def set_leader(self, proof: LeaderProof | None) -> None:
        self.leader.set(0 if proof is None else 1)
        self.leader_token.set(0 if proof is None else proof.fencing_token)

    def set_assignment(self, registry: RegistrySnapshot, node_id: int) -> None:
        self.assignment_version.set(registry.version)
        self.vnodes_owned.set(sum(1 for owner in registry.owners if owner == node_id))

    def set_restoring(self, vnodes: int) -> None:
        self.vnodes_restoring.set(vnodes)

    def set_source_lag(self, events: int | None) -> None:
        """Events behind the log ends; None (unknown) exposes NaN."""
        self.source_lag.set(math.nan if events is None else events)

    # -- events ------------------------------------------------------------------------------
    def checkpoint_finished(self, duration_s: float, verdict: CheckpointVerdict | None) -> None:
        """One checkpoint attempt ended: its duration under its verdict (or `failed` when none
        was recorded), and the verdict counted."""
        if not (math.isfinite(duration_s) and duration_s >= 0):
            raise InvalidArgument(f"checkpoint duration must be >= 0 s, not {duration_s!r}")
        outcome = CHECKPOINT_FAILED if verdict is None else verdict.value
        self.checkpoint_duration.labels(outcome=outcome).observe(duration_s)
        if verdict is not None:
            self.checkpoint_outcomes.labels(verdict=verdict.value).inc()
        if verdict is CheckpointVerdict.COMMIT:
            self.commit_seen()

    def commit_seen(self) -> None:
        """A cluster checkpoint committed now (as this process learned it)."""
        self._last_commit_s = self.clock.monotonic()

    def _last_commit_age_s(self) -> float:
        last = self._last_commit_s
        return math.nan if last is None else max(0.0, self.clock.monotonic() - last)

    def rotated(self) -> None:
        self.rotations.inc()

    def engine_bug(self) -> None:
        self.engine_bugs.inc()

    def events_processed(self, events: int) -> None:
        if events < 0:
            raise InvalidArgument(f"events processed must be >= 0, not {events}")
        self.events.inc(events)

    def store_request(self, op: str, requests: int = 1) -> None:
        self.store_requests.labels(op=op).inc(requests)

    def store_error(self, op: str, kind: str) -> None:
        self.store_errors.labels(op=op, kind=kind).inc()

    # -- rebalance.watcher.publish.PlacementSink ---------------------------------------------
    def publish_placement(self, metrics: PlacementMetrics) -> None:
        """RB §3.4: reset the per-domain vector (stale domains vanish), one series per domain,
        then the blast-radius ratio."""
        self.placement_vnodes.clear()
        for domain, count in sorted(metrics.vnodes_per_domain.items()):
            self.placement_vnodes.labels(domain=domain).set(count)
        self.placement_blast_radius.set(metrics.blast_radius_ratio)

    # -- per poll ----------------------------------------------------------------------------
    def update_from(self, controller: MetricsController, engine: MetricsEngine) -> None:
        """Refresh the gauges from local state only (no store requests): leadership and token,
        the engine's registry, and the engine's optional progress figures."""
        self.set_leader(controller.capture_leader_proof())
        self.set_assignment(engine.registry(), controller.node_id)
        progress = _optional(engine, "progress")
        if progress is None:
            return
        figures = progress()
        restoring = getattr(figures, "restoring_vnodes", None)
        if isinstance(restoring, int):
            self.set_restoring(restoring)
        commits = getattr(figures, "commits", None)
        if isinstance(commits, int):
            if commits > self._commits_seen:  # the engine committed its cut of a checkpoint
                self.commit_seen()
            self._commits_seen = commits
        quiescent = _optional(engine, "quiescent_through")
        if quiescent is not None and quiescent() is not None:
            self.commit_seen()  # DC-21: everything here is in the last commit
        for gauge, name in (
            (self.job_late_events, "late_events"),
            (self.job_dead_letters, "dead_letters"),
        ):
            value = getattr(figures, name, None)
            if isinstance(value, int):
                gauge.set(value)
        processed = getattr(figures, "events_processed", None)
        if isinstance(processed, int):
            if processed > self._events_seen:  # a counter only rises; a new engine starts at 0
                self.events.inc(processed - self._events_seen)
            self._events_seen = processed

    async def update_lag_from(self, engine: LagSource, *, deadline: float) -> int:
        """Measure the engine's source lag (store reads, bounded by `deadline`), expose the
        total and return it."""
        total = sum((await engine.source_lag(deadline=deadline)).values())
        self.set_source_lag(total)
        return total

    def exposition(self) -> bytes:
        """The Prometheus text format of every series (what the HTTP endpoint serves)."""
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's current value (tests and the status view), None when absent."""
        return self.registry.get_sample_value(name, labels or {})


def _optional(engine: object, name: str) -> Callable[[], Any] | None:
    found = getattr(engine, name, None)
    return found if callable(found) else None
