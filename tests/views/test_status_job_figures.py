"""`status` shows, per node running a job, its late events and dead letters (docs/jobs.md,
"Errors and policies"): each node's process lease renewal carries them in its report (ML-12,
`membership.records.JobReport`, no extra request), and status reads them from the lease
records it reads anyway."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from rich.console import Console

from laminar_cluster import EventLogSource, JsonLinesSink
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.jobs import Count, Job, Tumbling
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.job_node import JobRuntime
from laminar_cluster.runtime.node import StreamNode, StreamNodeConfig
from laminar_cluster.store import open_store
from laminar_cluster.views.status import StatusReader, StatusView
from laminar_cluster.views.status_render import render

BOOT = "0c2b9e4a-1111-4222-8333-444455556666"


def member(node: int, state: str, job: dict[str, int] | None) -> dict[str, Any]:
    return {
        "node": node,
        "state": state,
        "term": 2,
        "vnodes": 85,
        "last_renewal_age_ms": 400,
        "boot": BOOT,
        "why": None,
        "job": job,
    }


def text_of(view: StatusView, *, compact: bool = False) -> str:
    out = io.StringIO()
    Console(file=out, width=80 if compact else 200).print(render(view, compact=compact))
    return out.getvalue()


def table_rows(text: str) -> dict[str, list[str]]:
    """The members table's body rows by node: their cells, stripped."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0].isdigit():
            rows[cells[0]] = cells
    return rows


def test_the_members_table_shows_each_running_nodes_late_events_and_dead_letters() -> None:
    view = StatusView(store="memory://", observed_at_ms=0)
    view.members = [
        member(1, "active", {"late_events": 1_234_567, "dead_letters": 3}),
        member(2, "suspected", {"late_events": 0, "dead_letters": 0}),
        member(3, "active", None),  # runs no job (or an older node)
        member(4, "dead", {"late_events": 9, "dead_letters": 9}),  # runs nothing now
    ]
    text = text_of(view)
    header = next(line for line in text.splitlines() if "node" in line and "state" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]][6:8] == ["late", "dead letters"]
    rows = table_rows(text)
    assert {node: cells[6:8] for node, cells in rows.items()} == {
        "1": ["1,234,567", "3"],
        "2": ["0", "0"],
        "3": ["-", "-"],
        "4": ["-", "-"],
    }
    assert "job             1,234,567 late events, 3 dead letters (in the vnodes of 2 running" in (
        text
    )
    assert view.as_json()["members"][3]["job"] == {"late_events": 9, "dead_letters": 9}


def test_without_a_job_the_table_has_no_job_columns_and_compact_keeps_80_columns() -> None:
    view = StatusView(store="memory://", observed_at_ms=0)
    view.members = [member(1, "active", None), member(2, "active", None)]
    plain = text_of(view)
    assert "late" not in plain and "dead letters" not in plain and "\njob " not in plain
    view.members = [
        member(n, "suspected", {"late_events": 10**12, "dead_letters": 7}) for n in (1, 2)
    ]
    compact = text_of(view, compact=True)
    assert max(len(line) for line in compact.splitlines()) <= 80
    assert all(len(cells) == 7 for cells in table_rows(compact).values())  # no job columns
    assert "2,000,000,000,000 late events, 14 dead letters" in compact


JOB = (
    Job("figures")
    .source(EventLogSource())
    .key_by(lambda e: e["user"], name="user")  # an event without "user": a dead letter
    .event_time(lambda e: e["ts_ms"], out_of_orderness_ms=0)
    .window(Tumbling(size_ms=1_000), Count())
    .sink(JsonLinesSink("out/figures/"))
)


def test_a_nodes_late_events_and_dead_letters_flow_from_its_job_into_status() -> None:
    async def main() -> dict[str, int] | None:
        clock = RealClock()
        store = open_store("memory://")
        async with Producer(store, clock=clock) as producer:
            await producer.send("u1", {"user": "u1", "ts_ms": 5_000})
            await producer.send("u1", {"user": "u1", "ts_ms": 100})  # late: its window closed
            await producer.send("u1", {"ts_ms": 5_001})  # no user: the key function raises
        config = NodeConfig(
            node_id=1, ttl_s=1.0, poll_s=0.1, debounce_s=0.1, checkpoint_interval_s=0.5
        )
        stream = StreamNodeConfig(
            engine=EngineConfig(idle_s=0.01, idle_max_s=0.1), progress_log_s=0
        )
        node = StreamNode(
            store,
            clock,
            config,
            NodeLog(io.StringIO(), clock, 1),
            stream=stream,
            job=JobRuntime.of(JOB),
        )
        reader = StatusReader(store, clock)
        deadline = clock.monotonic() + 30
        async with asyncio.TaskGroup() as group:
            group.create_task(node.run())
            try:
                while clock.monotonic() < deadline:
                    view = await reader.read(timeout_s=10)
                    figures = view.members[0].get("job") if view.members else None
                    if figures is not None and figures["dead_letters"] > 0:
                        return figures
                    await clock.sleep(0.05)
                return None
            finally:
                node.stop()

    assert asyncio.run(main()) == {"late_events": 1, "dead_letters": 1}
