"""`NodeMetrics` (metrics/node_metrics.py): gauge values after `update_from`, checkpoint
durations and verdicts, placement series (RB §3.4), one registry per instance."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from laminar_cluster.assignment.placement import PlacementMetrics
from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import LeaderOwner, LeaderProof
from laminar_cluster.metrics import CHECKPOINT_FAILED, NodeMetrics
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.store import open_store
from tests.rebalance.scenario import Scenario

PROOF = LeaderProof(owner=LeaderOwner(node_id=2, boot_id="boot-2", process_term=3), fencing_token=7)


@dataclass
class FakeController:
    node_id: int = 2
    proof: LeaderProof | None = PROOF

    def capture_leader_proof(self) -> LeaderProof | None:
        return self.proof


@dataclass
class BareEngine:
    """Only `registry()`: the rebalance `BaseEngine`'s shape."""

    snapshot: RegistrySnapshot

    def registry(self) -> RegistrySnapshot:
        return self.snapshot


@dataclass(frozen=True)
class Progress:
    """The figures `update_from` reads from `progress()` (runtime.engine.EngineProgress)."""

    events_processed: int
    restoring_vnodes: int


@dataclass
class ProgressEngine(BareEngine):
    restoring: int = 0
    processed: int = 0
    lag: dict[int, int] = field(default_factory=dict)

    def progress(self) -> Progress:
        return Progress(events_processed=self.processed, restoring_vnodes=self.restoring)

    async def source_lag(self, *, deadline: float) -> dict[int, int]:
        return dict(self.lag)


def test_update_from_sets_leadership_assignment_and_progress() -> None:
    metrics, controller = NodeMetrics(), FakeController()
    engine = ProgressEngine(
        RegistrySnapshot(version=4, owners=(2, 1, 2, 2)), restoring=2, processed=100
    )
    metrics.update_from(controller, engine)
    assert metrics.value("laminar_leader") == 1
    assert metrics.value("laminar_leader_fencing_token") == 7
    assert metrics.value("laminar_assignment_version") == 4
    assert metrics.value("laminar_vnodes_owned") == 3
    assert metrics.value("laminar_vnodes_restoring") == 2
    assert metrics.value("laminar_events_processed_total") == 100

    # The engine's cumulative figure moves the counter by the difference only.
    engine.processed, engine.restoring = 250, 0
    controller.proof = None
    metrics.update_from(controller, engine)
    assert metrics.value("laminar_events_processed_total") == 250
    assert metrics.value("laminar_leader") == 0
    assert metrics.value("laminar_leader_fencing_token") == 0
    assert metrics.value("laminar_vnodes_restoring") == 0


def test_source_lag_is_the_total_over_partitions_and_nan_when_unknown() -> None:
    metrics = NodeMetrics()
    lag = metrics.value("laminar_source_lag_events")
    assert lag is not None and math.isnan(lag)
    engine = ProgressEngine(RegistrySnapshot(1, (1,)), lag={0: 5, 3: 37})
    assert asyncio.run(metrics.update_lag_from(engine, deadline=1e9)) == 42
    assert metrics.value("laminar_source_lag_events") == 42
    metrics.set_source_lag(None)
    lag = metrics.value("laminar_source_lag_events")
    assert lag is not None and math.isnan(lag)


def test_update_from_a_bare_engine_leaves_the_optional_figures() -> None:
    metrics = NodeMetrics()
    metrics.events_processed(5)
    metrics.update_from(FakeController(node_id=1), BareEngine(RegistrySnapshot(2, (1, 1, 2))))
    assert metrics.value("laminar_vnodes_owned") == 2
    assert metrics.value("laminar_assignment_version") == 2
    assert metrics.value("laminar_events_processed_total") == 5
    assert metrics.value("laminar_vnodes_restoring") == 0
    with pytest.raises(InvalidArgument):
        metrics.events_processed(-1)


def test_checkpoint_durations_by_outcome_and_verdicts_counted() -> None:
    metrics = NodeMetrics()
    assert metrics.value("laminar_checkpoint_outcomes_total", {"verdict": "commit"}) == 0
    metrics.checkpoint_finished(0.2, CheckpointVerdict.COMMIT)
    metrics.checkpoint_finished(0.4, CheckpointVerdict.COMMIT)
    metrics.checkpoint_finished(15.0, CheckpointVerdict.ABORT)
    metrics.checkpoint_finished(1.0, None)
    metrics.rotated()
    count = "laminar_checkpoint_duration_seconds_count"
    total = "laminar_checkpoint_duration_seconds_sum"
    assert metrics.value(count, {"outcome": "commit"}) == 2
    assert metrics.value(total, {"outcome": "commit"}) == pytest.approx(0.6)
    assert metrics.value(count, {"outcome": "abort"}) == 1
    assert metrics.value(count, {"outcome": CHECKPOINT_FAILED}) == 1
    bucket = "laminar_checkpoint_duration_seconds_bucket"
    assert metrics.value(bucket, {"outcome": "commit", "le": "0.25"}) == 1
    assert metrics.value(bucket, {"outcome": "abort", "le": "10.0"}) == 0
    assert metrics.value("laminar_checkpoint_outcomes_total", {"verdict": "commit"}) == 2
    assert metrics.value("laminar_checkpoint_outcomes_total", {"verdict": "abort"}) == 1
    assert metrics.value("laminar_rotations_total") == 1
    with pytest.raises(InvalidArgument):
        metrics.checkpoint_finished(-0.1, CheckpointVerdict.COMMIT)


def test_publish_placement_replaces_every_domain_series() -> None:
    metrics = NodeMetrics()
    metrics.publish_placement(PlacementMetrics({"r;z1": 2, "r;z2": 1, "unknown": 1}, 0.5))
    assert metrics.value("laminar_placement_vnodes_per_domain", {"domain": "r;z1"}) == 2
    assert metrics.value("laminar_placement_blast_radius_ratio") == 0.5
    metrics.publish_placement(PlacementMetrics({"r;z2": 4}, 1.0))
    assert metrics.value("laminar_placement_vnodes_per_domain", {"domain": "r;z1"}) is None
    assert metrics.value("laminar_placement_vnodes_per_domain", {"domain": "r;z2"}) == 4
    assert metrics.value("laminar_placement_blast_radius_ratio") == 1.0


def test_each_instance_has_its_own_registry_never_the_global_one() -> None:
    first, second = NodeMetrics(), NodeMetrics()  # the same names twice: no collision
    first.rotated()
    assert first.value("laminar_rotations_total") == 1
    assert second.value("laminar_rotations_total") == 0
    assert REGISTRY.get_sample_value("laminar_rotations_total") is None
    text = first.exposition().decode()
    assert "# TYPE laminar_store_requests_total counter" in text
    assert 'laminar_store_requests_total{op="put"} 0.0' in text


def test_update_from_a_real_controller_and_engine() -> None:
    async def main() -> tuple[NodeMetrics, NodeMetrics, int]:
        scenario = await Scenario.start(open_store("memory://"), SimulatedClock(seed=2), (1, 2))
        await scenario.bring_up((1, 2, 1, 1), leader=1)
        leader, follower = NodeMetrics(), NodeMetrics()
        leader.update_from(scenario.cluster.controller(1), scenario.engines[1])
        follower.update_from(scenario.cluster.controller(2), scenario.engines[2])
        proof = scenario.cluster.controller(1).capture_leader_proof()
        assert proof is not None
        return leader, follower, proof.fencing_token

    leader, follower, token = asyncio.run(main())
    assert (leader.value("laminar_leader"), leader.value("laminar_leader_fencing_token")) == (
        1,
        token,
    )
    assert (follower.value("laminar_leader"), follower.value("laminar_leader_fencing_token")) == (
        0,
        0,
    )
    assert leader.value("laminar_assignment_version") == 1
    assert leader.value("laminar_vnodes_owned") == 3 and follower.value("laminar_vnodes_owned") == 1


@dataclass(frozen=True)
class CommitProgress:
    """`progress()` figures with the engine's count of committed cuts."""

    commits: int


@dataclass
class CommittingEngine(BareEngine):
    commits: int = 0

    def progress(self) -> CommitProgress:
        return CommitProgress(commits=self.commits)


def test_last_commit_age_is_nan_until_a_commit_then_the_seconds_since_the_latest() -> None:
    async def main() -> None:  # the simulated clock advances inside a running loop
        clock = SimulatedClock(seed=5)
        metrics = NodeMetrics(clock=clock)
        engine = CommittingEngine(RegistrySnapshot(version=1, owners=(2,)))
        age = "laminar_last_commit_age_seconds"
        value = metrics.value(age)
        assert value is not None and math.isnan(value)
        metrics.update_from(FakeController(), engine)  # no commit yet
        value = metrics.value(age)
        assert value is not None and math.isnan(value)
        clock.advance(3.0)
        engine.commits = 1  # the engine committed its cut of a checkpoint
        metrics.update_from(FakeController(), engine)
        clock.advance(2.5)
        assert metrics.value(age) == 2.5  # computed at scrape time
        metrics.checkpoint_finished(0.4, CheckpointVerdict.ABORT)  # an abort is not a commit
        assert metrics.value(age) == 2.5
        metrics.checkpoint_finished(0.4, CheckpointVerdict.COMMIT)  # a commit this process led
        assert metrics.value(age) == 0.0
        clock.advance(1.0)
        metrics.update_from(FakeController(), engine)  # the count did not move: no new commit
        assert metrics.value(age) == 1.0
        assert f"# TYPE {age} gauge" in metrics.exposition().decode()

    asyncio.run(main())


@dataclass
class QuietEngine(CommittingEngine):
    through: int | None = None

    def quiescent_through(self) -> int | None:
        return self.through


def test_dc21_an_idle_node_skipping_checkpoints_does_not_age_its_last_commit() -> None:
    """DC-21: while the engine is quiescent through its last commit (the leader skips the
    periodic checkpoints: nothing is left to commit) the last commit's age stays at 0; once
    busy it ages again from the last moment it was quiescent."""

    async def main() -> None:
        clock = SimulatedClock(seed=6)
        metrics = NodeMetrics(clock=clock)
        engine = QuietEngine(RegistrySnapshot(version=1, owners=(2,)), commits=1)
        age = "laminar_last_commit_age_seconds"
        metrics.update_from(FakeController(), engine)  # the engine's commit
        engine.through = 4
        for _ in range(10):  # a long idle stretch: no commit at all
            clock.advance(30.0)
            metrics.update_from(FakeController(), engine)
            assert metrics.value(age) == 0.0
        engine.through = None  # busy: the next commit is due
        clock.advance(2.0)
        metrics.update_from(FakeController(), engine)
        assert metrics.value(age) == 2.0

    asyncio.run(main())


def test_every_series_is_laminar_prefixed_and_every_counter_ends_in_total() -> None:
    metrics = NodeMetrics()
    metrics.publish_placement(PlacementMetrics({"r;z1": 2}, 1.0))
    metrics.store_error("get", "StoreUnavailable")
    families = list(metrics.registry.collect())
    assert families
    for family in families:
        for sample in family.samples:
            assert sample.name.startswith("laminar_"), sample.name
            if family.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name


@dataclass
class JobProgress:
    """`progress()` figures of a node running a job."""

    late_events: int
    dead_letters: int


@dataclass
class JobEngine(BareEngine):
    late_events: int = 0
    dead_letters: int = 0

    def progress(self) -> JobProgress:
        return JobProgress(self.late_events, self.dead_letters)


def test_a_jobs_late_events_and_dead_letters_are_gauges_of_the_vnodes_held() -> None:
    metrics = NodeMetrics()
    engine = JobEngine(RegistrySnapshot(version=1, owners=(2,)), late_events=7, dead_letters=2)
    metrics.update_from(FakeController(), engine)
    assert metrics.value("laminar_job_late_events") == 7.0
    assert metrics.value("laminar_job_dead_letters") == 2.0
    engine.late_events = 3  # a vnode moved away with its count
    metrics.update_from(FakeController(), engine)
    assert metrics.value("laminar_job_late_events") == 3.0
