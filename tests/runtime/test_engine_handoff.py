"""`StreamEngine` (embedded in a `BaseEngine`) with the real coordinator (`ClusterCheckpointer`,
`CheckpointParticipant`, `coordinator.restore` through `CheckpointRestorer`) and the real event
log, on memory:// and file://: a graceful handoff of vnodes 2 and 3 from node 1 to node 2
(drain, pre-rotation checkpoint, adoption, restore from the committed capsule), after which the
committed output (`runtime.output.read_committed_output`) counts every event exactly once
(DC §1.7, DC §1.9, DC §3.4, DC §3.5).

V1 gives node 1 all 4 vnodes; V2 moves vnodes 2 and 3 (partitions 2, 6 and 3, 7) to node 2.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar_cluster.assignment.digest import drain_id, fence_matches_owner_map
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.coordinator.participant import CheckpointParticipant
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.runtime.checkpoint_restorer import CheckpointRestorer
from laminar_cluster.runtime.engine import EngineView, StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.output import decode_aggregate_records, read_committed_output
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import ObjectStore, open_store
from tests.assignment.snapshot_support import draining, participant, snapshot

TTL_S = 60.0
POLL_S = 0.005
PARTITIONS = 8
V1 = snapshot(1, [1, 1, 1, 1])
V2 = snapshot(2, [1, 1, 2, 2])
CONFIG = EngineConfig(batch_events=16, read_parallelism=4, idle_s=0.005, retry_s=0.02)
Totals = dict[int, tuple[int, int]]


@dataclass
class Node:
    view: EngineView
    participant: CheckpointParticipant
    restorer: CheckpointRestorer

    @property
    def engine(self) -> BaseEngine:
        return self.view.engine

    def events(self) -> int:
        return self.view.progress().events_processed


def open_url(backend: str, tmp_path: Path) -> str:
    return "memory://" if backend == "memory" else f"file://{tmp_path / 'store'}?fsync=false"


def authority_on(store: ObjectStore, clock: RealClock) -> LeaderLeaseStore:
    decisions = DecisionStore.shared(store, clock=clock)
    return LeaderLeaseStore(store, clock=clock, ttl_s=TTL_S, decisions=decisions)


def owners_of(engine: BaseEngine) -> Callable[[CheckpointAssignmentFence], Sequence[int] | None]:
    def owners(fence: CheckpointAssignmentFence) -> Sequence[int] | None:
        registry = engine.registry()
        if fence.assignment_version == registry.version and fence_matches_owner_map(
            fence, registry.owners
        ):
            return registry.owners
        return None

    return owners


def make_node(url: str, store: ObjectStore, clock: RealClock, node_id: int) -> Node:
    """One process: its own store client, authority view, log cursor and engine."""
    own = store if url == "memory://" else open_store(url)
    authority = authority_on(own, clock)
    restorer = CheckpointRestorer(own, authority.require_decisions(), authority)
    stream = StreamEngine(
        clock=clock, log=EventLog(own, clock=clock), processor=KeyedAggregation(), config=CONFIG
    )
    view = embed_plane(
        clock=clock,
        participant=participant(node_id),
        plane=stream,
        restorer=restorer,
        config=CONFIG,
    )
    answering = CheckpointParticipant(own, clock, authority, view.host, POLL_S)
    return Node(view, answering, restorer)


async def append_round(log: EventLog, clock: RealClock, round_: int, expected: Totals) -> None:
    """12 events per partition; keys shared across partitions (and so across vnodes)."""
    for partition in range(PARTITIONS):
        keys = [(partition * 7 + i * 3 + round_) % 10 for i in range(12)]
        values = [round_ * 1000 + partition * 10 + i for i in range(12)]
        await log.append(partition, keys, values, deadline=clock.monotonic() + 10.0)
        for key, value in zip(keys, values, strict=True):
            count, total = expected.get(key, (0, 0))
            expected[key] = (count + 1, total + value)


async def until(clock: RealClock, predicate: Callable[[], bool], what: str) -> None:
    end = clock.monotonic() + 10.0
    while not predicate():
        assert clock.monotonic() < end, f"timed out waiting for {what}"
        await clock.sleep(0.005)


async def activate(node: Node, current: AssignmentSnapshot, clock: RealClock) -> None:
    engine = node.engine
    await engine.adopt_assignment(current, deadline=clock.monotonic() + 10.0)
    activation = await engine.activate_authority(
        snapshot_fence(current), None, engine.authority_revision(), deadline=clock.monotonic() + 10
    )
    assert activation.installed


async def scenario(url: str) -> None:
    clock = RealClock()
    store = open_store(url)
    leader_authority = authority_on(store, clock)
    me = participant(1)
    began = await leader_authority.begin_new_term(
        LeaderLeaseOwner(node=1, boot=me.boot_incarnation, process_term=1),
        deadline=clock.monotonic() + 10.0,
    )
    assert isinstance(began, Acquired)
    proof = began.lease.proof()
    log = EventLog(store, clock=clock)
    await log.declare_partitions(PARTITIONS, deadline=clock.monotonic() + 10.0)
    one, two = make_node(url, store, clock, 1), make_node(url, store, clock, 2)
    one.engine.checkpointer = ClusterCheckpointer(
        leader_authority.require_decisions(),
        leader_authority,
        proof=lambda: proof,
        owners_of=owners_of(one.engine),
        poll_s=POLL_S,
        abort_reserve_s=0.5,
    )
    expected: Totals = {}
    shutdown = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        for node in (one, two):
            group.create_task(node.view.host.run(shutdown))
            group.create_task(node.participant.run(shutdown))
        try:
            await handoff(clock, log, one, two, expected)
            committed = await read_committed_output(
                leader_authority, decode_aggregate_records, deadline=clock.monotonic() + 10.0
            )
            totals: Totals = {}
            for key, count, total in committed.records:
                before = totals.get(key, (0, 0))
                totals[key] = (before[0] + count, before[1] + total)
            assert totals == expected  # every event exactly once, across the handoff
            assert committed.hidden == ()
        finally:
            shutdown.set()


async def handoff(clock: RealClock, log: EventLog, one: Node, two: Node, expected: Totals) -> None:
    def deadline() -> float:
        return clock.monotonic() + 20.0

    await activate(one, V1, clock)
    await append_round(log, clock, 1, expected)
    await until(clock, lambda: one.events() == 96, "node 1 to process round 1")
    first = await one.engine.checkpoint_until(deadline=deadline())
    assert first.success, first.error
    # The drain: vnodes 2 and 3 stop consuming; the pre-rotation checkpoint cuts them there.
    drain = draining(V1, [1, 1, 2, 2])
    transition = drain.drain_transition
    assert transition is not None
    one.engine.validate_source_drain_snapshot(drain)
    await one.engine.prepare_local_source_drain(transition, participant(1), deadline=deadline())
    activation = await one.engine.activate_authority(
        snapshot_fence(V1), transition, one.engine.authority_revision(), deadline=deadline()
    )
    assert activation.installed
    await append_round(log, clock, 2, expected)
    await until(clock, lambda: one.events() == 96 + 48, "node 1 to process vnodes 0 and 1")
    handoff = await one.engine.checkpoint_until(deadline=deadline())
    assert handoff.success, handoff.error
    outcome = await cluster_outcome(one.restorer.authority, handoff.epoch)
    assert outcome is not None and outcome.recovery_capsule is not None
    await one.engine.resolve_local_source_drain(
        drain_id(transition), SourceDrainOutcome.COMMIT, deadline=deadline()
    )
    assert one.events() == 144  # the revoking partitions never resumed
    await activate(one, V2, clock)
    await activate(two, V2, clock)
    # Node 2 restores vnodes 2 and 3 from the pre-rotation checkpoint and reads on from its cut.
    await until(clock, lambda: two.events() == 48, "node 2 to process round 2 of its vnodes")
    assert two.restorer.last_checkpoint == outcome.recovery_capsule
    assert two.view.progress().offsets == {2: 24, 3: 24, 6: 24, 7: 24}
    await append_round(log, clock, 3, expected)
    await until(clock, lambda: one.events() == 192 and two.events() == 96, "round 3")
    last = await one.engine.checkpoint_until(deadline=deadline())
    assert last.success, last.error


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_graceful_handoff_counts_every_event_exactly_once(backend: str, tmp_path: Path) -> None:
    asyncio.run(scenario(open_url(backend, tmp_path)))
