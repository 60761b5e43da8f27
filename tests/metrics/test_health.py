"""`/livez` and `/readyz` (metrics/health.py, metrics/server.py): each readiness reason from a
node's local state, then real HTTP requests against a real `laminar-cluster node` process."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from laminar_cluster.harness.fleet import NodeFleet, NodeTimings
from laminar_cluster.metrics.health import NOT_STARTED, node_readiness
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.node.rebalance_node import RebalanceNode
from tests.support.http import http_get

TTL_S = 2.0


@dataclass
class StubClock:
    now: float = 100.0

    def monotonic(self) -> float:
        return self.now


@dataclass
class StubHolder:
    released: bool = False
    live: bool = True

    def is_live(self) -> bool:
        return self.live


@dataclass
class StubCandidacy:
    eligible: bool = True

    def current(self) -> StubCandidacy:
        return self


@dataclass
class StubLeadership:
    known_at_s: float | None = 99.0
    candidacy: StubCandidacy = field(default_factory=StubCandidacy)

    def lease_known_at_s(self) -> float | None:
        return self.known_at_s


@dataclass
class StubEngine:
    version: int = 3
    fence: object | None = "fence"

    def registry(self) -> RegistrySnapshot:
        return RegistrySnapshot(version=self.version, owners=(1,))

    def installed_fence(self) -> object | None:
        return self.fence


@dataclass
class StubConfig:
    ttl_s: float = TTL_S


@dataclass
class StubLog:
    problem: str | None = None


@dataclass
class StubNode:
    holder: StubHolder | None = field(default_factory=StubHolder)
    controller: object | None = "controller"
    leadership: StubLeadership | None = field(default_factory=StubLeadership)
    engine: StubEngine | None = field(default_factory=StubEngine)
    clock: StubClock = field(default_factory=StubClock)
    config: StubConfig = field(default_factory=StubConfig)
    log: StubLog = field(default_factory=StubLog)
    rejoining: str | None = None


def readiness(node: StubNode) -> str | None:
    return node_readiness(cast(RebalanceNode, node))


def test_ready_only_with_lease_held_leader_known_and_assignment_adopted() -> None:
    assert readiness(StubNode()) is None
    assert readiness(StubNode(holder=None)) == NOT_STARTED
    assert readiness(StubNode(holder=StubHolder(released=True))) == "the node left the cluster"
    fenced = readiness(StubNode(holder=StubHolder(live=False)))
    assert fenced is not None and "process lease is not held" in fenced
    unknown = readiness(StubNode(leadership=StubLeadership(known_at_s=None)))
    assert unknown == "the leader lease state is not known yet"
    stale = readiness(StubNode(leadership=StubLeadership(known_at_s=100.0 - TTL_S - 0.1)))
    assert stale == f"the leader lease state was last learned over {TTL_S:g} s ago"
    # A node that is not a candidate reads no lease and needs none to serve.
    bystander = StubLeadership(known_at_s=None, candidacy=StubCandidacy(eligible=False))
    assert readiness(StubNode(leadership=bystander)) is None
    assert readiness(StubNode(engine=StubEngine(version=0))) == "no assignment adopted yet"
    unfenced = readiness(StubNode(engine=StubEngine(fence=None)))
    assert unfenced is not None and unfenced.startswith("assignment version 3: its fence")
    stuck = readiness(StubNode(log=StubLog(problem="control/leader-lease-head/v1.json: bad")))
    assert stuck == "stuck, repeating without progress: control/leader-lease-head/v1.json: bad"
    # A fenced process waiting to rejoin says so first, whatever its last incarnation left.
    rejoining = StubNode(holder=StubHolder(live=False), rejoining="node 1: process term 2 lapsed")
    assert readiness(rejoining) == "rejoining after a fence: node 1: process term 2 lapsed"


@pytest.mark.processes
def test_a_node_process_answers_livez_readyz_and_404(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    timings = NodeTimings(ttl_s=TTL_S, poll_s=0.2, debounce_s=0.2)
    with NodeFleet(f"file://{store}", tmp_path, timings) as fleet:
        args = ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
        run = fleet.start(1, args)
        started: list[dict[str, Any]] = []

        def has_started() -> bool:
            event = run.first(lambda e: e["event"] == "started")
            if event is not None:
                started.append(event)
            return event is not None

        fleet.wait_until("the started event", has_started, 60.0)
        base = f"http://127.0.0.1:{started[0]['metrics_port']}"
        assert started[0]["metrics_url"] == f"{base}/metrics"
        assert http_get(f"{base}/livez") == (200, "ok\n")
        answers: list[tuple[int, str]] = []

        def ready() -> bool:
            answers.append(http_get(f"{base}/readyz"))
            return answers[-1] == (200, "ready\n")

        fleet.wait_until("/readyz answers ready", ready, 60.0)
        for status, body in answers[:-1]:  # any earlier answer was a one-line reason
            assert status == 503 and body.startswith("not ready: ") and body.count("\n") == 1
        metrics = http_get(f"{base}/metrics")
        assert metrics[0] == 200 and "laminar_last_commit_age_seconds" in metrics[1]
        for path in ("/", "/metrics/", "/status", "/readyz?x=1/.."):
            status = http_get(f"{base}{path}")[0]
            assert status == (200 if path.startswith("/readyz?") else 404), path
