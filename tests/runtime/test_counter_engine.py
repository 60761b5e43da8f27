"""The embedding example (tests/runtime/counter_engine.py; docs/embedding.md) on real nodes:
`StreamNode`s in one process on memory://, each running a `CounterEngine` through the whole
control plane (process leases, leadership, watcher, rotations, distributed checkpoints,
restores). After a join (a graceful rotation: drain, pre-rotation checkpoint, handoff restore)
and after a node stops without leaving (its vnodes move through a recovery generation restored
from the last committed checkpoint), every vnode runs on exactly one live node and has counted
every event of its feed exactly once.
"""

from __future__ import annotations

import asyncio
import io
from collections import Counter
from dataclasses import dataclass

from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.harness.fleet import committed_head
from laminar_cluster.rebalance.engine.data_plane import VnodeCut
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.node import StreamNode, StreamNodeConfig
from laminar_cluster.store import ObjectStore, open_store
from tests.runtime.counter_engine import CounterEngine

VNODES = 8
KEYS = ("a", "b", "c", "d", "e")
BUDGET_S = 90.0  # a bound for a stuck run; an unloaded run takes about 15 s
STREAM = StreamNodeConfig(
    engine=EngineConfig(idle_s=0.01, retry_s=0.05),
    checkpoint_poll_s=0.02,
    prepare_timeout_s=3.0,
    decision_timeout_s=5.0,
    progress_log_s=0,
)


def node_config(node_id: int) -> NodeConfig:
    return NodeConfig(
        node_id=node_id,
        ttl_s=2.0,
        poll_s=0.1,
        debounce_s=0.2,
        checkpoint_interval_s=0.3,
        retry_delay_s=0.2,
        drain_ack_timeout_s=2.0,
        checkpoint_timeout_s=3.0,
        leave_timeout_s=10.0,
        vnode_count=VNODES,
    )


class WatchedCounter(CounterEngine):
    """The example, also noting the offset each vnode was restored at (0: from nothing)."""

    def __init__(self, feed: dict[int, list[str]]) -> None:
        super().__init__(feed)
        self.restored_at: list[tuple[int, int]] = []

    def restore(self, vnode: int, cut: VnodeCut | None, *, vnode_count: int) -> None:
        super().restore(vnode, cut, vnode_count=vnode_count)
        self.restored_at.append((vnode, self.offsets[vnode]))


@dataclass
class Member:
    node: StreamNode
    log: io.StringIO
    planes: list[WatchedCounter]  # the one its engine runs, once built

    def handed_over(self, vnodes: set[int]) -> bool:
        """Did one of `vnodes` start from a committed cut (not from its feed's start)?"""
        return any(v in vnodes and at > 0 for v, at in self.planes[-1].restored_at)


class Cluster:
    def __init__(self, store: ObjectStore, group: asyncio.TaskGroup) -> None:
        self.store, self.group, self.clock = store, group, RealClock()
        self.feed: dict[int, list[str]] = {vnode: [] for vnode in range(VNODES)}
        self.members: dict[int, Member] = {}
        self.deadline = self.clock.monotonic() + BUDGET_S
        self.appended = 0

    def start(self, node_id: int) -> Member:
        planes: list[WatchedCounter] = []

        def plane(store: ObjectStore, clock: Clock) -> CounterEngine:
            planes.append(WatchedCounter(self.feed))
            return planes[-1]

        text = io.StringIO()
        log = NodeLog(text, self.clock, node_id)
        node = StreamNode(
            self.store, self.clock, node_config(node_id), log, stream=STREAM, data_plane=plane
        )
        member = self.members[node_id] = Member(node, text, planes)
        self.group.create_task(node.run())
        return member

    def append(self, events: int) -> None:
        for i in range(self.appended, self.appended + events):
            self.feed[i % VNODES].append(KEYS[(i * 7) % len(KEYS)])
        self.appended += events

    def exactly_once(self, live: tuple[int, ...]) -> bool:
        """Every vnode runs on exactly one of `live` and has counted its whole feed once."""
        running: Counter[int] = Counter()
        for node_id in live:
            for vnode, counts in self.members[node_id].planes[-1].counts.items():
                running[vnode] += 1
                if counts != Counter(self.feed[vnode]):
                    return False
        return running == Counter(range(VNODES))

    async def converge(self, live: tuple[int, ...], what: str) -> None:
        """Until the committed head is rendezvous over `live` and `exactly_once(live)`."""
        expected = rendezvous_assignment(VNODES, live)
        while True:
            head = await committed_head(self.store)
            if head is not None and list(head.owners) == expected and self.exactly_once(live):
                return
            if self.clock.monotonic() > self.deadline:
                logs = {n: m.log.getvalue()[-2000:] for n, m in self.members.items()}
                raise AssertionError(f"timed out waiting for {what}; head {head}; logs {logs}")
            await self.clock.sleep(0.05)


async def scenario() -> None:
    async with asyncio.TaskGroup() as group:
        cluster = Cluster(open_store("memory://"), group)
        try:
            cluster.start(1)
            cluster.start(2)
            cluster.append(40)
            await cluster.converge((1, 2), "two nodes to count the first events")
            cluster.start(3)  # a join: a graceful rotation hands vnodes over to node 3
            cluster.append(40)
            await cluster.converge((1, 2, 3), "the rotation to node 3")
            owners = rendezvous_assignment(VNODES, (1, 2, 3))
            assert cluster.members[3].handed_over({v for v, o in enumerate(owners) if o == 3})
            first = set(cluster.members[1].planes[-1].counts)
            cluster.members[1].node.stop()  # gone without leaving: recovery moves its vnodes
            cluster.append(40)
            await cluster.converge((2, 3), "the recovery of node 1's vnodes")
            for node_id in (2, 3):
                engine = cluster.members[node_id].node.engine
                assert engine is not None
                assert isinstance(engine.engine.recovery_checkpoint(), RecoveryCapsuleRef)
            assert any(cluster.members[n].handed_over(first) for n in (2, 3))
        finally:
            for member in cluster.members.values():
                member.node.stop()


def test_counter_engine_counts_every_event_once_through_a_rotation_and_a_recovery() -> None:
    asyncio.run(scenario())
