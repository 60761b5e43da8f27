"""Chaos with a file source (docs/jobs.md "File sources", FS-2 and FS-3 under rebalance): 3 to
5 `laminar-cluster node --job examples.wordcount:job` processes on one file:// store under the
seeded SIGKILL, restart, join and graceful leave of `tests/processes/chaos.py` (the seed is
printed; LAMINAR_CHAOS_SEED replays its schedule), while text files land under `books/` one
PUT at a time over the whole chaos window. Files are read by the owners of their vnodes and
their words repartitioned to the words' owners through the record log, so both the splits'
read positions and the routed groups' tags are cut and restored across every move. Then, once
every word is counted, each word's highest count in the Parquet results (DuckDB) equals the
count of its occurrences in the files: nothing lost, nothing twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.store import CREATE, ObjectStore, open_store
from laminar_cluster.views.status import StatusReader, event_log_opener
from tests.examples.support import query
from tests.examples.test_wordcount import books, reference
from tests.processes.chaos import (
    TIMINGS,
    ChaosConfig,
    ChaosFailure,
    ChaosReport,
    ChaosRound,
    chaos_seed,
    gated_round,
)

pytestmark = [pytest.mark.processes]

JOB = "examples.wordcount:job"
LINES_PER_FILE = 150
RESULTS_POLL_S = 1.0


class FileGate:
    """The round's gate: `allow(n)` lands whole files until `n` lines have landed."""

    def __init__(self, store: ObjectStore, files: dict[str, bytes]) -> None:
        self.store, self.pending, self.lines = store, list(files.items()), 0

    async def allow(self, events: int) -> None:
        while self.pending and self.lines < events:
            name, body = self.pending.pop(0)
            await self.store.put(name, body, CREATE)
            self.lines += body.count(b"\n")


def counted(out: Path) -> dict[str, int]:
    """Each word's highest delivered count, as DuckDB reads the Parquet results."""
    table = f"read_parquet('{out}/wordcount/**/*.parquet')"
    return dict(query(f"select word, max(count) from {table} group by word"))


def check(out: Path, expected: Counter[str]) -> str | None:
    """None when every word's count equals the reference, else what differs."""
    got = counted(out)
    if got == dict(expected):
        return None
    wrong = sorted(w for w in expected.keys() | got.keys() if got.get(w) != expected.get(w))
    return f"{len(wrong)} of {len(expected)} words differ, e.g. " + ", ".join(
        f"{w}: {got.get(w)} counted, {expected.get(w)} in the files" for w in wrong[:4]
    )


async def _round(
    config: ChaosConfig, files: dict[str, bytes], out: Path, workdir: Path, report: ChaosReport
) -> None:
    clock = RealClock()
    url = f"file://{workdir}/store?fsync=false"
    store = open_store(url)
    reader = StatusReader(store, clock, event_log_opener(clock))
    expected = reference(files)
    try:
        gate = FileGate(store, files)
        with NodeFleet(url, workdir, TIMINGS) as fleet:
            chaos = ChaosRound(config, fleet, report)
            await gated_round(
                chaos,
                reader,
                gate,
                lambda: _settle(chaos, out, expected),
                all_in=f"all {len(files)} files landed",
            )
    finally:
        await store.close()


async def _settle(chaos: ChaosRound, out: Path, expected: Counter[str]) -> None:
    """Until the results hold as many words as the files (a word counted twice would show as
    more, which the check then names)."""
    deadline = time.monotonic() + chaos.config.settle_s
    total, want = 0, sum(expected.values())
    while total < want:
        if time.monotonic() >= deadline:
            raise ChaosFailure(f"after {chaos.config.settle_s} s: {total:,} of {want:,} words")
        chaos.check_exits()
        chaos.top_up()
        await asyncio.sleep(RESULTS_POLL_S)
        total = sum((await asyncio.to_thread(counted, out)).values())
    chaos.note(f"all out: {total:,} words counted")


class _Verdict:
    def __init__(self, problem: str | None, words: int) -> None:
        self.problem, self.words = problem, words

    @property
    def passed(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        if self.problem is None:
            return f"exactly once: the counts of {self.words:,} words equal the files'"
        return f"NOT exactly once: {self.problem}"


def _file_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chaos_s: float) -> ChaosReport:
    out = tmp_path / "out"
    monkeypatch.setenv("LAMINAR_EXAMPLE_OUT", str(out))  # read by the nodes' job module
    seed = chaos_seed()
    files = books(seed, int(chaos_s * 2), lines=LINES_PER_FILE)  # two files a second
    config = ChaosConfig(
        seed=seed,
        chaos_s=chaos_s,
        events=len(files) * LINES_PER_FILE,
        live_min=3,  # 3 to 5 nodes run the job
        node_args=("--job", JOB),
    )
    print(f"file chaos seed {seed}: {len(files)} files", flush=True)
    report = ChaosReport(seed=seed)
    started = time.monotonic()
    try:
        asyncio.run(_round(config, files, out, tmp_path, report))
    except ChaosFailure as failure:
        report.error = str(failure)
    else:
        expected = reference(files)
        report.check = _Verdict(check(out, expected), len(expected))
    report.elapsed_s = time.monotonic() - started
    print(f"{report.describe()}\n  node logs and results under {tmp_path}")
    return report


def test_fs2_fs3_file_chaos_every_word_counted_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make test's round: a 20 s chaos window (about 7 actions) over 40 files landing."""
    report = _file_round(tmp_path, monkeypatch, chaos_s=20.0)
    assert report.passed, report.describe()


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_file_chaos_soak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make soak: a 150 s chaos window (about 50 actions) over 300 files landing."""
    report = _file_round(tmp_path, monkeypatch, chaos_s=150.0)
    assert report.passed, report.describe()
