"""An idle cluster does not checkpoint (docs/protocols/distributed-checkpoint.md, DC-21; issue 15).

Three `StreamNode`s with the reference engine on memory:// (real control plane, short timings):
once the workload is committed and every node reports quiescence through the last Commit, the
leader skips its periodic checkpoints: no request touches a checkpoint object over many
intervals (only the participants' pointer polls, DC-18, which DC-20 bounds per second). An
event appended afterwards is committed within DC-21's bound.
"""

from __future__ import annotations

import asyncio
import io
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

from laminar_cluster.authority.cluster_outcome_reads import highest_cluster_committed_outcome
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.coordinator.paths import POINTER_PATH
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.node import StreamNode, StreamNodeConfig
from laminar_cluster.runtime.output import open_output_authority
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult, open_store
from laminar_cluster.store.forwarding import ForwardingStore

T = TypeVar("T")
VNODES = 8
PARTITIONS = 8
IDLE_MAX_S = 0.1
TTL_S = 2.0  # renewals every 0.5 s
POLL_S = 0.1  # discovery, watcher and duties tick
INTERVAL_S = 0.3
# DC-21: the engine notices an append within idle_max_s (and a read), reports it at its next
# renewal (ttl / 4), the leader's discovery poll reads it, the next duties tick checkpoints;
# plus the checkpoint itself and a margin for a loaded test host.
BOUND_S = IDLE_MAX_S + TTL_S / 4 + 2 * POLL_S + 3.0
BUDGET_S = 60.0
STREAM = StreamNodeConfig(
    engine=EngineConfig(idle_s=0.01, idle_max_s=IDLE_MAX_S, retry_s=0.05),
    checkpoint_poll_s=0.02,
    prepare_timeout_s=3.0,
    decision_timeout_s=5.0,
    progress_log_s=0,
)


class KeyCountingStore(ForwardingStore):
    """Counts requests by (op, key) (a listing by its prefix)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.by_key: Counter[tuple[str, str]] = Counter()

    def _note(self, op: str, key: str, call: Awaitable[T]) -> Awaitable[T]:
        self.by_key[(op, key)] += 1
        return call

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self._note("get", key, super().get(key, end=end))

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        return await self._note("get", key, super().get_if_changed(key, e_tag))

    async def head(self, key: str) -> ObjectMeta:
        return await self._note("head", key, super().head(key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        return await self._note("put", key, super().put(key, body, mode))

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self._note("list", prefix, super().list(prefix, offset=offset, limit=limit))

    async def delete(self, key: str) -> None:
        await self._note("delete", key, super().delete(key))

    def checkpoint_requests(self) -> Counter[tuple[str, str]]:
        """Requests on checkpoint objects (attempts, pointer writes, ids, outcomes, capsules),
        the pointer's polls apart."""
        return Counter(
            {
                (op, key): n
                for (op, key), n in self.by_key.items()
                if key.startswith("checkpoint") and not (op == "get" and key == POINTER_PATH)
            }
        )


def node_config(node_id: int) -> NodeConfig:
    return NodeConfig(
        node_id=node_id,
        ttl_s=TTL_S,
        poll_s=POLL_S,
        debounce_s=0.2,
        checkpoint_interval_s=INTERVAL_S,
        retry_delay_s=0.2,
        drain_ack_timeout_s=2.0,
        checkpoint_timeout_s=3.0,
        leave_timeout_s=10.0,
        vnode_count=VNODES,
    )


class QuietCluster:
    def __init__(self, group: asyncio.TaskGroup) -> None:
        self.clock = RealClock()
        self.store = KeyCountingStore(open_store("memory://"))
        self.group = group
        self.nodes: dict[int, StreamNode] = {}
        self.logs: dict[int, io.StringIO] = {}
        self.producer = EventLog(self.store, clock=self.clock)
        self.deadline = self.clock.monotonic() + BUDGET_S

    def start(self, node_id: int) -> StreamNode:
        text = self.logs[node_id] = io.StringIO()
        node = StreamNode(
            self.store,
            self.clock,
            node_config(node_id),
            NodeLog(text, self.clock, node_id),
            stream=STREAM,
        )
        self.nodes[node_id] = node
        self.group.create_task(node.run())
        return node

    async def append(self, partition: int, count: int) -> None:
        keys = [partition * 1000 + i for i in range(count)]
        await self.producer.append(
            partition, keys, [1] * count, deadline=self.clock.monotonic() + 10
        )

    async def committed_events(self) -> int:
        """The events the highest Commit's capsule covers (its source offsets' sum)."""
        authority = open_output_authority(self.store, self.clock)
        decisions = authority.require_decisions()
        outcome = await highest_cluster_committed_outcome(authority)
        if outcome is None or outcome.recovery_capsule is None:
            return 0
        capsule = await decisions.load_recovery_capsule(outcome.recovery_capsule)
        return sum(capsule.source_offsets.values())

    def leader(self) -> StreamNode | None:
        for node in self.nodes.values():
            leadership = node.node.leadership
            if leadership is not None and leadership.proof() is not None:
                return node
        return None

    async def wait(self, what: str, check: Callable[[], Awaitable[bool]]) -> float:
        """Seconds until `await check()` holds."""
        started = self.clock.monotonic()
        while not await check():
            if self.clock.monotonic() > self.deadline:
                logs = {n: text.getvalue()[-1500:] for n, text in self.logs.items()}
                raise AssertionError(f"timed out waiting for {what}; logs {logs}")
            await self.clock.sleep(0.02)
        return self.clock.monotonic() - started

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def _checkpoints_led(cluster: QuietCluster) -> int:
    return sum(sum(node.checkpoints.values()) for node in cluster.nodes.values())


def _skips(cluster: QuietCluster) -> int:
    return sum(node.quiet.skipped for node in cluster.nodes.values() if node.quiet is not None)


async def _quiet_then_busy() -> None:
    async with asyncio.TaskGroup() as group:
        cluster = QuietCluster(group)
        try:
            await cluster.producer.declare_partitions(PARTITIONS, deadline=BUDGET_S + 1e9)
            for partition in range(PARTITIONS):
                await cluster.append(partition, 3)
            for node_id in (1, 2, 3):
                cluster.start(node_id)

            async def all_committed() -> bool:
                return await cluster.committed_events() == 3 * PARTITIONS

            await cluster.wait("the workload committed", all_committed)

            async def skipping() -> bool:
                return _skips(cluster) > 0

            await cluster.wait("the leader skipping its periodic checkpoints", skipping)
            # (a) quiet: over many intervals, no request on any checkpoint object (the
            # pointer's conditional polls apart, DC-18) and no checkpoint led.
            led, skips = _checkpoints_led(cluster), _skips(cluster)
            cluster.store.by_key.clear()
            await cluster.clock.sleep(10 * INTERVAL_S)
            assert cluster.store.checkpoint_requests() == Counter(), (
                cluster.store.checkpoint_requests()
            )
            assert _checkpoints_led(cluster) == led
            assert _skips(cluster) > skips
            polls = cluster.store.by_key[("get", POINTER_PATH)]
            assert polls > 0  # participants still watch for a prepare (DC-18)
            # (b) an event appended: committed within DC-21's bound.
            before = await cluster.committed_events()
            await cluster.append(5, 1)

            async def committed() -> bool:
                return await cluster.committed_events() == before + 1

            took_s = await cluster.wait("the new event committed", committed)
            assert took_s <= BOUND_S, (took_s, BOUND_S)
            assert _checkpoints_led(cluster) > led
        finally:
            cluster.stop()


def test_dc21_an_idle_cluster_skips_its_checkpoints_and_commits_a_new_event_in_bound() -> None:
    asyncio.run(_quiet_then_busy())
