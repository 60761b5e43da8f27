"""The rebalance control plane with real node processes on one file:// store
(RB §1.1 graceful rotation, RB §1.2 recovery, RB §4.2 controller loop, RB §4.17 graceful exit).

Four `laminar-cluster node` processes start and converge on one committed assignment covering
the four; a fifth joins and the committed head becomes rendezvous(256, 5 nodes); SIGTERM makes a
follower leave gracefully (its process exits 0 only after an assignment without it is running);
SIGKILL of the leader leaves three live nodes, and the committed head converges on rendezvous
over them with their exact boots as participants. Every committed version from 2 on is backed
by an authority decision. The durable state is read directly from the store.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from laminar_cluster.assignment.audit import AuthorityDecisions, audit_authority_backing
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.assignment.snapshot_io import inventory
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import RealClock
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.harness.fleet import NodeFleet, NodeTimings, Run, committed_head
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import ObjectStore, open_store

VNODES = 256
TIMINGS = NodeTimings(
    ttl_s=2.0,
    poll_s=0.2,
    debounce_s=0.5,
    checkpoint_interval_s=1.0,
    retry_delay_s=0.5,
    drain_ack_timeout_s=5.0,
)
BUDGET_S = 90.0
PRUNED = "listed version has no snapshot object"


class Scenario:
    def __init__(self, fleet: NodeFleet, store: ObjectStore, runner: asyncio.Runner) -> None:
        self.fleet, self.store, self.runner = fleet, store, runner
        self.deadline = time.monotonic() + BUDGET_S
        self.audited: set[int] = set()

    def remaining_s(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def expected(self, nodes: list[int]) -> tuple[list[int], list[FenceParticipant]]:
        owners = rendezvous_assignment(VNODES, nodes)
        runs = {node: self.fleet.current(node) for node in nodes}
        boots = {node: None if run is None else run.boot for node, run in runs.items()}
        participants = [
            FenceParticipant(node_id=node, boot_incarnation=str(boots[node]))
            for node in sorted(set(owners))
        ]
        return owners, participants

    def head_is_rendezvous(self, nodes: list[int]) -> bool:
        """The committed head is rendezvous over `nodes` with their current boots."""
        head = self.runner.run(committed_head(self.store))
        if head is None:
            return False
        owners, participants = self.expected(nodes)
        return list(head.owners) == owners and list(head.participants) == participants

    def wait_head(self, nodes: list[int]) -> int:
        self.fleet.wait_until(
            f"committed head = rendezvous over {nodes}",
            lambda: self.head_is_rendezvous(nodes),
            self.remaining_s(),
        )
        head = self.runner.run(committed_head(self.store))
        assert head is not None
        return head.assignment_version

    def leader(self) -> Run | None:
        """The live run whose latest leadership event is a grant."""
        self.fleet.refresh()
        for run in self.fleet.live_runs():
            marks = [e for e in run.events if e["event"] in ("leader", "leader_lost")]
            if marks and marks[-1]["event"] == "leader":
                return run
        return None

    def audit(self) -> None:
        """Every retained version >= 2 is backed by an authority decision. The nodes prune while
        this reads: a version listed and then pruned before its read is no finding."""
        clock = RealClock()
        authority = LeaderLeaseStore(
            self.store,
            clock=clock,
            ttl_s=TIMINGS.ttl_s,
            decisions=DecisionStore.shared(self.store, clock=clock),
        )
        problems = self.runner.run(
            audit_authority_backing(self.store, AuthorityDecisions(authority))
        )
        retained = set(self.runner.run(inventory(self.store)))
        assert [p for p in problems if p.version in retained or p.reason != PRUNED] == []
        self.audited.update(retained)


@contextmanager
def _scenario(tmp_path: Path) -> Iterator[Scenario]:
    url = f"file://{tmp_path / 'store'}?fsync=false"
    with NodeFleet(url, tmp_path, TIMINGS) as fleet, asyncio.Runner() as runner:
        store = open_store(url)
        try:
            yield Scenario(fleet, store, runner)
        except BaseException:
            print(fleet.tail())  # every node's log tail, shown by pytest on failure
            raise
        finally:
            runner.run(store.close())


def _events(run: Run) -> list[str]:
    return [event["event"] for event in run.events]


@pytest.mark.processes
def test_rebalance_join_graceful_leave_and_kill(tmp_path: Path) -> None:
    with _scenario(tmp_path) as scenario:
        fleet = scenario.fleet
        for node in (1, 2, 3, 4):
            fleet.start(node)
        scenario.wait_head([1, 2, 3, 4])

        fleet.start(5)
        joined = scenario.wait_head([1, 2, 3, 4, 5])
        assert joined >= 2
        scenario.audit()

        leader = scenario.leader()
        assert leader is not None
        leaver = next(node for node in (2, 3, 4, 5) if node != leader.node)
        run = fleet.signal(leaver, signal.SIGTERM)
        assert run.process.wait(timeout=scenario.remaining_s()) == 0
        fleet.refresh()
        events = _events(run)
        assert events.index("leaving") < events.index("draining") < events.index("left")
        owned = [e["vnodes"] for e in run.events if e["event"] == "adopted"]
        assert owned[-1] == 0  # it ran an assignment without itself before leaving
        remaining = [node for node in (1, 2, 3, 4, 5) if node != leaver]
        scenario.wait_head(remaining)
        scenario.audit()

        fleet.signal(leader.node, signal.SIGKILL)
        leader.process.wait(timeout=10)
        survivors = [node for node in remaining if node != leader.node]
        final = scenario.wait_head(survivors)
        assert final > joined
        scenario.audit()
        assert max(scenario.audited) == final and min(scenario.audited) <= joined
        for node in survivors:  # every survivor runs the final assignment
            current = fleet.current(node)
            assert current is not None and current.alive
            fleet.wait_until(
                f"node {node} runs assignment {final}",
                lambda current=current: any(  # type: ignore[misc]
                    e["event"] == "adopted" and e["version"] >= final for e in current.events
                ),
                scenario.remaining_s(),
            )
