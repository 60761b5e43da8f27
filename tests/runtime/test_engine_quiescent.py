"""Quiescence of the reference engine and its host (docs/embedding.md `quiescent_since_cut`;
docs/protocols/distributed-checkpoint.md DC-21): the plane is quiescent only when nothing was
processed, restored or dropped since its last capture, that capture was not aborted, and the
log's published ends (as last polled) show nothing new for a consumable partition; the host
reports `quiescent_through` = the checkpoint id of its last committed cut only then, and never
while a cut is held. A plane without the method is never quiescent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.rebalance.engine.data_plane import plane_quiescent
from laminar_cluster.runtime.engine import EngineView, StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import ObjectStore, open_store
from tests.assignment.snapshot_support import participant, snapshot
from tests.runtime.counter_engine import CounterEngine
from tests.runtime.test_engine import FakeRestorer, running

PARTITIONS = 8
V1 = snapshot(1, [1, 1, 2, 2])  # node 1 consumes partitions 0, 1, 4, 5
CONFIG = EngineConfig(batch_events=3, read_parallelism=3, idle_s=0.005, idle_max_s=0.05)
SETTLE_S = 0.3  # a few of the longest idle waits: the ends are polled


@dataclass(frozen=True)
class _Prepare:
    attempt: CheckpointAttempt
    fence: CheckpointAssignmentFence


async def _engine(store: ObjectStore, clock: RealClock) -> tuple[StreamEngine, EngineView]:
    stream = StreamEngine(
        clock=clock,
        log=EventLog(store, clock=clock),
        processor=KeyedAggregation(),
        partitions=PARTITIONS,
        config=CONFIG,
    )
    view = embed_plane(
        clock=clock,
        participant=participant(1),
        plane=stream,
        restorer=FakeRestorer(),
        config=CONFIG,
    )
    return stream, view


async def _activate(view: EngineView, clock: RealClock) -> None:
    engine = view.engine
    await engine.adopt_assignment(V1, deadline=clock.monotonic() + 10)
    activation = await engine.activate_authority(
        snapshot_fence(V1), None, engine.authority_revision(), deadline=clock.monotonic() + 10
    )
    assert activation.installed


async def _cut(view: EngineView, checkpoint_id: int, *, committed: bool) -> None:
    attempt = CheckpointAttempt.canonical(checkpoint_id)
    clock = view.engine.clock
    await view.host.cut(_Prepare(attempt, snapshot_fence(V1)), deadline=clock.monotonic() + 10)
    assert view.host.quiescent_through() is None  # a held cut is never quiescent
    await view.host.resolve(attempt, committed, deadline=clock.monotonic() + 10)


def test_dc21_the_engine_is_quiescent_only_between_a_committed_cut_and_the_next_change() -> None:
    async def main() -> None:
        clock = RealClock()
        store = open_store("memory://")
        producer = EventLog(store, clock=clock)
        await producer.declare_partitions(PARTITIONS, deadline=clock.monotonic() + 10)
        for partition in range(PARTITIONS):
            await producer.append(partition, [partition], [1], deadline=clock.monotonic() + 10)
        stream, view = await _engine(store, clock)
        async with running(view.host):
            await _activate(view, clock)
            while view.progress().events_processed < 4:
                await clock.sleep(0.005)
            await clock.sleep(SETTLE_S)
            assert not stream.quiescent_since_cut()  # never cut
            assert view.host.quiescent_through() is None
            await _cut(view, 3, committed=True)
            await clock.sleep(SETTLE_S)
            assert stream.quiescent_since_cut()
            assert view.host.quiescent_through() == 3
            # An append to a partition of another node's vnode changes nothing here.
            await producer.append(2, [7], [1], deadline=clock.monotonic() + 10)
            await clock.sleep(SETTLE_S)
            assert view.host.quiescent_through() == 3
            # An append to one of ours: busy as soon as the ends show it, until the next cut.
            await producer.append(4, [7], [1], deadline=clock.monotonic() + 10)
            while view.progress().events_processed < 5:
                await clock.sleep(0.005)
            assert not stream.quiescent_since_cut()
            assert view.host.quiescent_through() is None
            await _cut(view, 4, committed=False)  # aborted: its output is pending again
            await clock.sleep(SETTLE_S)
            assert not stream.quiescent_since_cut()
            assert view.host.quiescent_through() is None
            await _cut(view, 5, committed=True)
            await clock.sleep(SETTLE_S)
            assert view.host.quiescent_through() == 5
            view.host.faulted()  # the vnodes dropped: the committed cut no longer holds them
            assert view.host.quiescent_through() is None

    asyncio.run(main())


def test_dc21_published_ends_ahead_of_an_offset_or_unknown_are_not_caught_up() -> None:
    async def main() -> None:
        clock = RealClock()
        store = open_store("memory://")
        producer = EventLog(store, clock=clock)
        await producer.declare_partitions(2, deadline=clock.monotonic() + 10)
        await producer.append(1, [5, 6], [1, 1], deadline=clock.monotonic() + 10)
        reader = EventLog(store, clock=clock)
        assert not reader.caught_up({0: 0})  # never polled: unknown
        await reader.poll_ends([0, 1], deadline=clock.monotonic() + 10)
        assert reader.caught_up({0: 0}) and reader.caught_up({1: 2}) and reader.caught_up({})
        assert not reader.caught_up({1: 1}) and not reader.caught_up({0: 0, 1: 0})

    asyncio.run(main())


def test_dc21_a_plane_without_the_method_is_never_quiescent() -> None:
    assert not plane_quiescent(CounterEngine({}))
    assert not plane_quiescent(object())
