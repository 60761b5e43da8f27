"""`laminar-cluster produce` and `laminar-cluster output`, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.harness.workload import Workload, expected_aggregates
from laminar_cluster.store import open_store
from tests.authority.test_cluster_outcome_helpers import elect, open_leader
from tests.cli.test_commands import run
from tests.runtime.test_output import NODE_1, NODE_2, decide, far, stage

WORKLOAD = Workload(seed=5, events=20_000, partitions=8, keys=50)
WORKLOAD_ARGS = ["--events", "20000", "--partitions", "8", "--keys", "50", "--seed", "5"]


def test_produce_prints_progress_and_rate_and_resumes(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    result = run("produce", "--store", url, *WORKLOAD_ARGS, "--batch-events", "1000")
    assert result.returncode == 0, result.stderr
    assert "produced 20,000 of 20,000 events (100%)" in result.stdout
    assert "events/s" in result.stdout
    again = run("produce", "--store", url, *WORKLOAD_ARGS, "--json")
    assert again.returncode == 0, again.stderr
    figures = json.loads(again.stdout)
    assert (figures["appended"], figures["skipped"], figures["batches"]) == (0, 20_000, 0)

    async def read_back() -> int:
        log = EventLog(open_store(url))
        ends = [await log.end_offset(p, deadline=far()) for p in range(8)]
        assert await log.partitions(deadline=far()) == 8
        return sum(ends)

    assert asyncio.run(read_back()) == 20_000
    refused = run(
        "produce",
        "--store",
        url,
        "--events",
        "5",
        "--partitions",
        "8",
        "--keys",
        "50",
        "--seed",
        "5",
    )
    assert refused.returncode == 2 and "Refused" in refused.stderr


def commit_expected_output(url: str, *, twice: int | None = None) -> None:
    """Commit the workload's aggregates as two attempts of two nodes (keys split by parity);
    with `twice`, key `twice` is emitted again in the second attempt (counted twice)."""

    async def body() -> None:
        store = open_store(url)
        leader = open_leader(store, 1)
        proof = await elect(leader)
        rows = [
            (key, count, total) for key, (count, total) in expected_aggregates(WORKLOAD).items()
        ]
        first, second = rows[: len(rows) // 2], rows[len(rows) // 2 :]
        for attempt, part in ((1, first), (2, second)):
            extra = [row for row in rows if row[0] == twice] if attempt == 2 else []
            manifests = {
                1: await stage(store, attempt, NODE_1, [r for r in part if r[0] % 2 == 0]),
                2: await stage(store, attempt, NODE_2, [r for r in part if r[0] % 2] + extra),
            }
            await decide(leader, proof, attempt, manifests)
        await stage(store, 3, NODE_1, rows)  # an attempt without outcome: not counted

    asyncio.run(body())


def test_output_prints_totals_and_passes_the_check(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    commit_expected_output(url)
    result = run("output", "--store", url)
    assert result.returncode == 0, result.stderr
    assert "committed: 20,000 events over 50 keys" in result.stdout
    assert "in 2 attempts (last 2), 4 outputs" in result.stdout
    checked = run("output", "--store", url, *WORKLOAD_ARGS, "--json")
    assert checked.returncode == 0, checked.stderr
    figures = json.loads(checked.stdout)
    assert (figures["events"], figures["keys"], figures["attempts"]) == (20_000, 50, 2)
    assert figures["check"]["passed"] is True and figures["check"]["lost"] == 0


def test_output_check_fails_on_an_event_counted_twice(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    commit_expected_output(url, twice=7)
    count = expected_aggregates(WORKLOAD)[7][0]
    result = run("output", "--store", url, *WORKLOAD_ARGS)
    assert result.returncode == 1, result.stderr
    assert f"check failed: 0 events lost, {count} counted twice" in result.stdout
    assert "key 7:" in result.stdout
