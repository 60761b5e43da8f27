"""The stream node (`laminar-cluster node`: `runtime.node.StreamNode`) as real processes on one
file:// store: exactly once through a join, a SIGKILL of the leader and a graceful leave
(issue 7; DC §1.7, DC §1.9, DC §1.10).

`laminar-cluster produce` writes the deterministic workload; three nodes run it until the
committed output (`runtime.output.read_committed_output`, the Commit-only reader) equals the
workload's independently folded aggregates (`harness.workload.expected_aggregates`). Then a
fourth node joins, the leader is SIGKILLed and another node SIGTERMed while more events are
produced, and the committed output must again equal the expected aggregates: no key's count or
sum off by anything. While waiting, no key's committed count may ever exceed its expected count
(an event counted twice never shows, even transiently). A second test reads /metrics of a node.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.clock import RealClock
from laminar_cluster.harness.fleet import NodeFleet, NodeTimings, Run, committed_head
from laminar_cluster.harness.workload import Aggregates, Workload, expected_aggregates
from laminar_cluster.runtime.output import (
    aggregate_committed,
    decode_aggregate_records,
    open_output_authority,
    read_committed_output,
)
from laminar_cluster.store import ObjectStore, open_store

VNODES = 256
SEED = 11
FIRST = Workload(seed=SEED, events=20_000, partitions=16, keys=500)
SECOND = Workload(seed=SEED, events=30_000, partitions=16, keys=500)  # extends FIRST
BUDGET_S = 240.0  # a bound for a stuck run (pytest-timeout is 300 s); unloaded runs take 20-40 s


@dataclass(frozen=True, slots=True)
class StreamTimings(NodeTimings):
    """The fleet's timings plus the stream node's own options."""

    checkpoint_timeout_s: float = 5.0
    metrics_port: int | None = None

    def options(self) -> list[str]:
        extra = ["--checkpoint-timeout", str(self.checkpoint_timeout_s)]
        if self.metrics_port is not None:
            extra += ["--metrics-port", str(self.metrics_port)]
        return [*NodeTimings.options(self), *extra]


# ttl 5 s as the demo and the chaos harness: with 2 s, a node starved of CPU on a loaded host
# fenced itself (missed renewal) before the first checkpoint, the bootstrap liveness gap
# (docs/protocols/rebalance.md "Known liveness gap"), and the cluster never committed.
TIMINGS = StreamTimings(
    ttl_s=5.0,
    poll_s=0.2,
    debounce_s=0.5,
    checkpoint_interval_s=1.0,
    retry_delay_s=0.5,
    drain_ack_timeout_s=15.0,  # only bounds waits: a starved host got no ack quorum in 5 s,
    checkpoint_timeout_s=15.0,  # nor a pre-rotation checkpoint, and retried the join for minutes
)


class Cluster:
    def __init__(self, url: str, fleet: NodeFleet, store: ObjectStore, runner: asyncio.Runner):
        self.url, self.fleet, self.store, self.runner = url, fleet, store, runner
        self.clock = RealClock()
        self.authority = open_output_authority(store, self.clock)
        self.deadline = time.monotonic() + BUDGET_S
        self.reads = 0

    def remaining_s(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def produce(self, workload: Workload) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "laminar_cluster.cli", "produce", "--store", self.url]
        command += [*("--events", str(workload.events), "--seed", str(workload.seed))]
        command += [*("--partitions", str(workload.partitions), "--keys", str(workload.keys))]
        command += ["--batch-events", "500"]  # several batches per partition
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def committed(self) -> tuple[Aggregates, int]:
        """Committed count and sum per key, and the hidden outputs' count."""
        self.reads += 1
        result = self.runner.run(
            read_committed_output(
                self.authority, decode_aggregate_records, deadline=self.clock.monotonic() + 20.0
            )
        )
        return aggregate_committed(result.records), len(result.hidden)

    def wait_exactly_once(self, expected: Aggregates, what: str) -> None:
        """Until the committed output equals `expected`; never a count above it meanwhile."""

        def check() -> bool:
            totals, hidden = self.committed()
            over = [k for k, (count, _) in totals.items() if count > expected.get(k, (0, 0))[0]]
            assert over == [], f"counted twice: keys {over[:10]}"
            assert hidden == 0
            return totals == expected

        self.fleet.wait_until(what, check, self.remaining_s())

    def head_is_rendezvous(self, nodes: list[int]) -> bool:
        head = self.runner.run(committed_head(self.store))
        return head is not None and list(head.owners) == rendezvous_assignment(VNODES, nodes)

    def leader(self) -> Run | None:
        """The live run whose latest leadership event is a grant."""
        self.fleet.refresh()
        for run in self.fleet.live_runs():
            marks = [e for e in run.events if e["event"] in ("leader", "leader_lost")]
            if marks and marks[-1]["event"] == "leader":
                return run
        return None


@contextmanager
def _cluster(tmp_path: Path, timings: StreamTimings = TIMINGS) -> Iterator[Cluster]:
    url = f"file://{tmp_path / 'store'}?fsync=false"
    with NodeFleet(url, tmp_path, timings) as fleet, asyncio.Runner() as runner:
        store = open_store(url)
        try:
            yield Cluster(url, fleet, store, runner)
        except BaseException:
            print(fleet.tail(60))  # every node's log tail, shown by pytest on failure
            raise
        finally:
            runner.run(store.close())


def _produced(process: subprocess.Popen[str], timeout_s: float) -> None:
    output, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, output


@pytest.mark.processes
def test_stream_nodes_count_every_event_once_through_join_kill_and_leave(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster:
        fleet = cluster.fleet
        started_s = time.monotonic()
        _produced(cluster.produce(FIRST), cluster.remaining_s())
        for node in (1, 2, 3):
            fleet.start(node)
        cluster.wait_exactly_once(expected_aggregates(FIRST), "3 nodes commit the workload")
        three_nodes_s = time.monotonic() - started_s

        fleet.start(4)
        fleet.wait_until(
            "the head covers 4 nodes",
            lambda: cluster.head_is_rendezvous([1, 2, 3, 4]),
            cluster.remaining_s(),
        )
        leader = cluster.leader()
        assert leader is not None
        fleet.signal(leader.node, signal.SIGKILL)
        producer = cluster.produce(SECOND)  # while the cluster recovers
        survivors = [node for node in (1, 2, 3, 4) if node != leader.node]
        fleet.wait_until(
            f"the recovery head is rendezvous over {survivors}",
            lambda: cluster.head_is_rendezvous(survivors),
            cluster.remaining_s(),
        )
        # Only after the recovery: a node draining while a recovery removes a dead owner is
        # neither retained (not assignable) nor fenceable (it renews), so its leave could only end
        # in its leave timeout (RB §3.3, RB §4.3 step 16).
        leaver = survivors.pop(0)
        leaving = fleet.signal(leaver, signal.SIGTERM)
        _produced(producer, cluster.remaining_s())
        assert leaving.process.wait(timeout=cluster.remaining_s()) == 0  # drained, then left
        cluster.wait_exactly_once(expected_aggregates(SECOND), "survivors commit the rest")
        fleet.wait_until(
            f"the head is rendezvous over {survivors}",
            lambda: cluster.head_is_rendezvous(survivors),
            cluster.remaining_s(),
        )
        print(
            f"3 nodes committed {FIRST.events:,} events {three_nodes_s:.1f} s after the start; "
            f"everything took {time.monotonic() - started_s:.1f} s, {cluster.reads} output reads"
        )


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@pytest.mark.processes
def test_node_serves_metrics_with_leader_and_assignment_version(tmp_path: Path) -> None:
    timings = StreamTimings(ttl_s=2.0, poll_s=0.2, debounce_s=0.2, metrics_port=0)
    with _cluster(tmp_path, timings) as cluster:
        run = cluster.fleet.start(1)
        cluster.fleet.wait_until(
            "the started event",
            lambda: run.first(lambda e: e["event"] == "started") is not None,
            cluster.remaining_s(),
        )
        started = run.first(lambda e: e["event"] == "started")
        assert started is not None and started["metrics_port"] > 0
        url = started["metrics_url"]
        assert url == f"http://127.0.0.1:{started['metrics_port']}/metrics"

        def leads_version_1() -> bool:
            samples = _scrape(url)
            return samples["laminar_leader"] == 1 and samples["laminar_assignment_version"] >= 1

        cluster.fleet.wait_until("node 1 leads v1", leads_version_1, cluster.remaining_s())
        samples = _scrape(url)
        assert samples["laminar_leader_fencing_token"] >= 1
        assert samples["laminar_vnodes_owned"] == VNODES
        assert samples['laminar_store_requests_total{op="get"}'] > 0
