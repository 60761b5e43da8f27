"""The reference engine on a quiet log (runtime/engine_loop.py, DC §3.7 "Log ends"): once it
caught up it lists nothing, polls the log's published ends with back-off (idle waits doubling
from `idle_s` to `idle_max_s`), and still notices new events within about `idle_max_s`."""

from __future__ import annotations

import asyncio

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.runtime.engine import StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import open_store
from laminar_cluster.store.counting import CountingStore
from tests.assignment.snapshot_support import participant, snapshot
from tests.runtime.test_engine import FakeRestorer, running

PARTITIONS = 8
V1 = snapshot(1, [1, 1, 2, 2])  # node 1 consumes partitions 0, 1, 4, 5
IDLE_MAX_S = 0.1
CONFIG = EngineConfig(batch_events=3, read_parallelism=3, idle_s=0.005, idle_max_s=IDLE_MAX_S)
QUIET_S = 1.0


def test_a_caught_up_engine_polls_the_ends_with_back_off_and_never_lists() -> None:
    async def main() -> None:
        clock = RealClock()
        store = CountingStore(open_store("memory://"))
        producer = EventLog(store, clock=clock)
        for partition in range(PARTITIONS):
            await producer.append(partition, [partition], [1], deadline=clock.monotonic() + 10)
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

        async def events_until(count: int) -> float:
            start = clock.monotonic()
            while view.progress().events_processed < count:
                assert clock.monotonic() - start < 5.0, "events not consumed"
                await clock.sleep(0.002)
            return clock.monotonic() - start

        async with running(view.host):
            engine = view.engine
            await engine.adopt_assignment(V1, deadline=clock.monotonic() + 10)
            activation = await engine.activate_authority(
                snapshot_fence(V1),
                None,
                engine.authority_revision(),
                deadline=clock.monotonic() + 10,
            )
            assert activation.installed
            await events_until(4)
            await clock.sleep(0.5)  # caught up, and backed off
            store.reset()
            await clock.sleep(QUIET_S)
            # No listing; one conditional GET of the ends per idle wait, the waits at their
            # longest: about QUIET_S / IDLE_MAX_S requests (today's engine listed every
            # partition every idle_s: ~4 / 0.005 s = 800 requests a second).
            assert store.requests.get("list", 0) == 0, store.requests
            assert store.requests["get"] <= QUIET_S / IDLE_MAX_S + 2, store.requests
            # New events are noticed within the longest wait (and a read).
            await producer.append(5, [9], [1], deadline=clock.monotonic() + 10)
            assert await events_until(5) < IDLE_MAX_S + 0.5

    asyncio.run(main())
