"""Chaos with a windowed job (issue 16 "What must show"): 3 to 5 `laminar-cluster node
--job examples.clickstream:job` processes on one file:// store under the seeded SIGKILL,
restart, join and graceful leave of `tests/processes/chaos.py` (the seed is printed;
LAMINAR_CHAOS_SEED replays its schedule), while clicks are produced through the public
`Producer` in small chunks every POLL_S over the whole chaos window. Then, once every click is
counted in a window or listed late, the results read back the way a user would (DuckDB over the
Parquet and JSON Lines result directories, SQL over PostgreSQL) equal `tumbling_reference`, the
independent computation of the window and lateness rules: each window once with its count,
the late clicks exactly, the PostgreSQL table the same windows. Nothing lost, nothing twice.

Why the result is deterministic under chaos: lateness depends only on the order of events
within a partition (the watermark is per vnode, restored with the vnode's state), so no kill,
restart or rebalance may change which clicks are late. The one rule that depends on wall time
is `--close-idle-windows`: a vnode that processed no event for that long closes its windows
(its watermark jumps to the end), and every later click of it is late. So IDLE_CLOSE_S must be
longer than any pause in production and processing (production never pauses that long here:
a chunk every POLL_S, every user in most chunks), or the reference differs; at the end of
production the last windows close after it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from examples import clickstream
from laminar_cluster import Producer
from laminar_cluster.clock import RealClock
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.store import open_store
from laminar_cluster.views.status import StatusReader, event_log_opener
from tests.examples.support import PARTITIONS, query, tumbling_reference
from tests.processes.chaos import (
    TIMINGS,
    ChaosConfig,
    ChaosFailure,
    ChaosReport,
    ChaosRound,
    chaos_seed,
    gated_round,
)

pytestmark = [pytest.mark.processes, pytest.mark.postgres]

JOB = "examples.clickstream:job"
IDLE_CLOSE_S = 10.0  # longer than any pause in production (module docstring)
USERS = 100
CLICKS_PER_S = 400  # produced over the chaos window
RESULTS_POLL_S = 1.0

Click = dict[str, Any]


class ClickGate:
    """The round's gate over the public `Producer`: `allow(n)` sends the first `n` clicks not
    sent yet and flushes, so they are in the log when it returns."""

    def __init__(self, producer: Producer, clicks: Sequence[Click]) -> None:
        self.producer, self.clicks, self.sent = producer, clicks, 0

    async def allow(self, events: int) -> None:
        for click in self.clicks[self.sent : events]:
            await self.producer.send(click["user"], click)
        self.sent = max(self.sent, min(events, len(self.clicks)))
        await self.producer.flush()


@dataclass(frozen=True)
class Results:
    """The job's results as a user reads them: DuckDB over the result directory, SQL."""

    out: Path
    dsn: str

    def minutes(self) -> list[tuple[Any, ...]]:
        parquet = f"read_parquet('{self.out}/clickstream/minutes/**/*.parquet')"
        return query(f"select user, window_start_ms, clicks from {parquet}")

    def late(self) -> list[tuple[Any, ...]]:
        return query(
            f"select user, ts_ms from read_ndjson_auto('{self.out}/clickstream/late/**/*.jsonl')"
        )

    def table(self) -> list[tuple[Any, ...]]:
        try:
            with psycopg.connect(self.dsn) as connection:
                return connection.execute(
                    'select "user", window_start_ms, clicks from clicks_per_minute'
                ).fetchall()
        except psycopg.errors.UndefinedTable:
            return []

    def progress(self) -> tuple[int, int, int]:
        """(clicks counted in Parquet windows, late clicks listed, clicks in the SQL table)."""
        return (
            sum(row[2] for row in self.minutes()),
            len(self.late()),
            sum(row[2] for row in self.table()),
        )


@dataclass(frozen=True)
class JobCheck:
    """The results against the reference; `problems` names each difference."""

    windows: int
    late: int
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        if self.passed:
            return (
                f"exactly once: {self.windows:,} windows (Parquet and PostgreSQL) and "
                f"{self.late:,} late clicks equal the reference"
            )
        return "NOT exactly once:\n    " + "\n    ".join(self.problems)


def difference(what: str, got: Counter[Any], want: Counter[Any]) -> str | None:
    """None if equal, else one line: how many rows are missing and unexpected, the first few."""
    if got == want:
        return None
    missing, extra = want - got, got - want
    return (
        f"{what}: {sum(missing.values())} expected rows missing (first {sorted(missing)[:4]}), "
        f"{sum(extra.values())} unexpected (first {sorted(extra)[:4]})"
    )


def check_results(results: Results, clicks: Sequence[Click]) -> JobCheck:
    counts, late = tumbling_reference(
        clicks, "user", clickstream.MINUTE_MS, clickstream.OUT_OF_ORDER_MS
    )
    windows = Counter((user, start, count) for (user, start), count in counts.items())
    late_clicks = Counter((click["user"], click["ts_ms"]) for click in late)
    found = (
        difference("Parquet windows", Counter(results.minutes()), windows),
        difference("late clicks (JSON Lines)", Counter(results.late()), late_clicks),
        difference("PostgreSQL clicks_per_minute", Counter(results.table()), windows),
    )
    return JobCheck(len(windows), len(late), tuple(p for p in found if p is not None))


async def _round(
    config: ChaosConfig,
    clicks: Sequence[Click],
    results: Results,
    workdir: Path,
    report: ChaosReport,
) -> None:
    clock = RealClock()
    url = f"file://{workdir}/store?fsync=false"
    store = open_store(url)
    reader = StatusReader(store, clock, event_log_opener(clock))
    try:
        async with Producer(store, partitions=PARTITIONS, clock=clock) as producer:
            gate = ClickGate(producer, clicks)
            with NodeFleet(url, workdir, TIMINGS) as fleet:
                chaos = ChaosRound(config, fleet, report)
                await gated_round(
                    chaos,
                    reader,
                    gate,
                    lambda: _settle(chaos, results, clicks),
                    all_in=f"all {len(clicks):,} clicks produced",
                )
    finally:
        await store.close()


async def _settle(chaos: ChaosRound, results: Results, clicks: Sequence[Click]) -> None:
    """Until every click is counted in a Parquet window or listed late, and the SQL table
    holds every counted click (a sink is delivered a checkpoint after the one before it)."""
    settle_s = chaos.config.settle_s
    deadline = time.monotonic() + settle_s
    counted = late = in_table = 0
    while counted + late < len(clicks) or in_table < counted:
        if time.monotonic() >= deadline:
            raise ChaosFailure(
                f"after {settle_s} s: {counted:,} clicks counted and {late:,} late of "
                f"{len(clicks):,}; {in_table:,} in the SQL table"
            )
        chaos.check_exits()
        chaos.top_up()
        await asyncio.sleep(RESULTS_POLL_S)
        counted, late, in_table = await asyncio.to_thread(results.progress)
    chaos.note(f"all out: {counted:,} counted, {late:,} late, {in_table:,} in the SQL table")


def run_job_chaos(
    config: ChaosConfig, clicks: Sequence[Click], results: Results, workdir: Path
) -> ChaosReport:
    """One round of the clickstream job under chaos; its report (`passed`, `describe()`)."""
    print(f"job chaos seed {config.seed}: {len(clicks):,} clicks", flush=True)
    report = ChaosReport(seed=config.seed)
    started = time.monotonic()
    try:
        asyncio.run(_round(config, clicks, results, workdir, report))
    except ChaosFailure as failure:
        report.error = str(failure)
    else:
        report.check = check_results(results, clicks)
    report.elapsed_s = time.monotonic() - started
    return report


@pytest.fixture
def job_dsn(postgres_dsn: str) -> Iterator[str]:
    """A fresh database on the test server (the sink's table and markers start empty)."""
    name = f"chaos_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute(f'create database "{name}"')
    yield make_conninfo(postgres_dsn, dbname=name)
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute(f'drop database "{name}" with (force)')


def _job_round(
    tmp_path: Path, job_dsn: str, monkeypatch: pytest.MonkeyPatch, chaos_s: float
) -> ChaosReport:
    out = tmp_path / "out"
    monkeypatch.setenv("LAMINAR_EXAMPLE_OUT", str(out))  # read by the nodes' job module
    monkeypatch.setenv("LAMINAR_EXAMPLE_PG", job_dsn)
    seed = chaos_seed()
    config = ChaosConfig(
        seed=seed,
        chaos_s=chaos_s,
        events=int(CLICKS_PER_S * chaos_s),
        live_min=3,  # 3 to 5 nodes run the job
        node_args=("--job", JOB, "--close-idle-windows", str(IDLE_CLOSE_S)),
    )
    clicks = clickstream.clicks(seed=seed, count=config.events, users=USERS)
    report = run_job_chaos(config, clicks, Results(out, job_dsn), tmp_path)
    print(f"{report.describe()}\n  node logs and results under {tmp_path}")
    return report


def test_job_chaos_windows_and_late_clicks_exactly_once(
    tmp_path: Path, job_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make test's round: a 25 s chaos window (about 8 actions) over 10,000 clicks."""
    report = _job_round(tmp_path, job_dsn, monkeypatch, chaos_s=25.0)
    assert report.passed, report.describe()


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_job_chaos_soak(tmp_path: Path, job_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 150 s chaos window (about 50 actions) over 60,000 clicks."""
    report = _job_round(tmp_path, job_dsn, monkeypatch, chaos_s=150.0)
    assert report.passed, report.describe()
