"""The leader's `Deliverer` (docs/jobs.md "Exactly once", "Cost"): committed checkpoints are
delivered in order, each participant's records of each sink's stream once; a new leader
resumes from where the sinks stand; a committed checkpoint costs 1 + N GETs (its marker and
each participant's manifest) and no listing, a listing only at a change of leader."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.jobs import Emit
from laminar_cluster.rebalance.engine.data_plane import Cut
from laminar_cluster.runtime.delivery import Deliverer, JobSink
from laminar_cluster.runtime.job_processor import encode_output
from laminar_cluster.runtime.output import open_output_authority
from laminar_cluster.store.counting import CountingStore
from tests.coordinator.support import Cluster, FakeHost, make_cluster


@dataclass
class JobHost(FakeHost):
    """A participant whose output is a job's: one main and one late record per attempt."""

    def __post_init__(self) -> None:
        self.base_cut = FakeHost.cut

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        cut = await self.base_cut(self, prepare, deadline=deadline)
        node, checkpoint = self.me.node_id, prepare.attempt.checkpoint_id
        emits = [
            Emit("main", {"node": node, "checkpoint": checkpoint}),
            Emit("late", {"node": node, "late_at": checkpoint}),
        ]
        return Cut(vnodes=cut.vnodes, output=encode_output(emits))


@dataclass
class RecordingSink:
    """A sink writer that keeps what it applied (a unit test of the deliverer only; the real
    sinks have their own tests)."""

    applied: dict[tuple[int, int], list[dict[str, object]]] = field(default_factory=dict)
    calls: list[tuple[int, int]] = field(default_factory=list)

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        key = (delivery.checkpoint_id, delivery.node_id)
        self.calls.append(key)
        if key in self.applied:
            return False
        self.applied[key] = [dict(r) for r in delivery.records]
        return True

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        return max((c for c, _ in self.applied), default=None)

    async def close(self) -> None:
        return None


def run(body: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(await make_cluster("memory://"))

    asyncio.run(main())


async def committed(cluster: Cluster, count: int) -> list[int]:
    hosts = [JobHost(h.me, h.fence, h.vnodes) for h in map(cluster.host, (1, 2, 3))]
    participants = [cluster.participant(host) for host in hosts]
    ids = []
    async with cluster.running(participants):
        for _ in range(count):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
            assert result.success, result.error
            ids.append(result.checkpoint_id)
    return ids


def deliverer(
    cluster: Cluster, main: RecordingSink, late: RecordingSink
) -> tuple[Deliverer, CountingStore]:
    counted = CountingStore(cluster.store)
    authority = open_output_authority(counted, cluster.clock)
    sinks = [JobSink("main", "main", main), JobSink("late", "late", late)]
    return Deliverer(authority, cluster.clock, "job", sinks, leading=lambda: True), counted


def test_committed_checkpoints_reach_each_sink_in_order_once_per_participant() -> None:
    async def body(cluster: Cluster) -> None:
        ids = await committed(cluster, 3)
        main, late = RecordingSink(), RecordingSink()
        first, _ = deliverer(cluster, main, late)
        await first.step(deadline=cluster.deadline())
        expected = [(c, n) for c in ids for n in (1, 2, 3)]
        assert main.calls == expected and late.calls == expected  # checkpoint order, node order
        assert main.applied[(ids[1], 2)] == [{"node": 2, "checkpoint": ids[1]}]
        assert late.applied[(ids[1], 2)] == [{"node": 2, "late_at": ids[1]}]
        # A new leader resumes from where the sinks stand: the newest checkpoint again (it may
        # be half delivered), no earlier one, and nothing is applied twice.
        second, _ = deliverer(cluster, main, late)
        await second.step(deadline=cluster.deadline())
        assert main.calls[len(expected) :] == [(ids[-1], n) for n in (1, 2, 3)]
        assert len(main.applied) == len(expected)

    run(body)


def test_a_committed_checkpoint_costs_its_marker_and_one_manifest_per_participant() -> None:
    async def body(cluster: Cluster) -> None:
        ids = await committed(cluster, 1)
        main, late = RecordingSink(), RecordingSink()
        leader, counted = deliverer(cluster, main, late)
        await leader.step(deadline=cluster.deadline())  # a new leader: one listing
        assert counted.requests["list"] >= 1
        newer = await committed(cluster, 1)
        counted.reset()
        leader.committed(newer[0])
        await leader.step(deadline=cluster.deadline())
        assert dict(counted.requests) == {"get": 1 + 3}  # marker + 3 manifests, no listing
        assert main.calls[-3:] == [(newer[0], n) for n in (1, 2, 3)] and ids[0] < newer[0]
        counted.reset()
        await leader.step(deadline=cluster.deadline())  # nothing new: no request
        assert counted.total == 0

    run(body)
