"""A throughput micro-benchmark of one `StreamEngine` (issue 7 target: at least 200,000 events/s
for one node of the reference engine). Not a test: nothing asserts timing.

It produces a deterministic workload into a store (`harness.workload`), then starts one engine
that owns all 256 vnodes (a single-node assignment, nothing to restore) on a fresh `EventLog`
(cold partition cursors, so every batch is read from the store) and times it from the fence
activation until every event is processed; the totals are checked against the workload's
independently computed aggregates.

    python -m laminar_cluster.bench.engine [--store URL] [--events N] ...
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence, validate_snapshot
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.harness.workload import Workload, expected_aggregates, produce
from laminar_cluster.rebalance.engine.restores import RestoredCuts, RestoreSource
from laminar_cluster.runtime.engine import StreamEngine, embed_plane
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.processor import KeyedAggregation
from laminar_cluster.store import open_store

VNODES = 256


@dataclass(frozen=True, slots=True)
class EngineBench:
    events: int
    partitions: int
    produce_s: float
    process_s: float
    events_per_s: float
    totals_match: bool


async def _empty_restore(
    source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
) -> RestoredCuts:
    return dict.fromkeys(vnodes)


def single_node_snapshot(participant: FenceParticipant) -> AssignmentSnapshot:
    snapshot = AssignmentSnapshot(
        version=1,
        assignment_version=1,
        owners=(participant.node_id,) * VNODES,
        participants=(participant,),
        updated_at_ms=0,
        draining=False,
        drain_transition=None,
    )
    validate_snapshot(snapshot)
    return snapshot


async def engine_throughput(
    store_url: str,
    workload: Workload,
    *,
    config: EngineConfig,
    produce_batch_events: int = 5_000,
    timeout_s: float = 600.0,
) -> EngineBench:
    clock = RealClock()
    store = open_store(store_url)
    started = clock.monotonic()
    await produce(
        EventLog(store, clock=clock),
        workload,
        batch_events=produce_batch_events,
        deadline=started + timeout_s,
    )
    produced = clock.monotonic()
    me = FenceParticipant(node_id=1, boot_incarnation=str(uuid.UUID(int=11)))
    processor = KeyedAggregation()
    log = EventLog(store, clock=clock)
    plane = StreamEngine(
        clock=clock, log=log, processor=processor, partitions=workload.partitions, config=config
    )
    view = embed_plane(
        clock=clock, participant=me, plane=plane, restorer=_empty_restore, config=config
    )
    engine = view.engine
    snapshot = single_node_snapshot(me)
    deadline = clock.monotonic() + timeout_s
    shutdown = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(view.host.run(shutdown))
        await engine.adopt_assignment(snapshot, deadline=deadline)
        begin = clock.monotonic()
        await engine.activate_authority(
            snapshot_fence(snapshot), None, engine.authority_revision(), deadline=deadline
        )
        while plane.counters.events < workload.events:
            if clock.monotonic() > deadline:
                shutdown.set()
                raise LaminarError(f"engine bench: not done in {timeout_s} s")
            await view.host.wait_change(0.001)
        end = clock.monotonic()
        shutdown.set()
    totals: dict[int, tuple[int, int]] = {}
    for vnode in processor.vnodes():
        for key, (count, total) in processor.totals(vnode).items():
            before = totals.get(key, (0, 0))
            totals[key] = (before[0] + count, before[1] + total)
    return EngineBench(
        events=workload.events,
        partitions=workload.partitions,
        produce_s=produced - started,
        process_s=end - begin,
        events_per_s=workload.events / max(end - begin, 1e-9),
        totals_match=totals == expected_aggregates(workload),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="default: file:// in a temporary dir")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batch-events", type=int, default=EngineConfig().batch_events)
    parser.add_argument("--read-parallelism", type=int, default=EngineConfig().read_parallelism)
    args = parser.parse_args()
    workload = Workload(
        seed=args.seed, events=args.events, partitions=args.partitions, keys=args.keys
    )
    config = EngineConfig(batch_events=args.batch_events, read_parallelism=args.read_parallelism)
    with tempfile.TemporaryDirectory() as directory:
        url = args.store or f"file://{directory}/store?fsync=false"
        result = asyncio.run(engine_throughput(url, workload, config=config))
    print(
        f"{result.events:,} events over {result.partitions} partitions: produced in "
        f"{result.produce_s:.2f} s; one engine processed them in {result.process_s:.2f} s = "
        f"{result.events_per_s:,.0f} events/s; totals match the workload: {result.totals_match}"
    )


if __name__ == "__main__":
    main()
