"""The word count example over text files in the bucket, for real and under rebalance: node
processes on a file:// store read files put under `books/` (some before the nodes start, some
while a node joins, one is SIGKILLed and restarted, and one leaves gracefully), and the highest
count of each word in the Parquet results, read by DuckDB, equals an independent count of the
files' words: every word of every file counted once, nothing lost, nothing twice, although the
vnodes reading the files and the vnodes counting the words moved between nodes meanwhile."""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from examples import wordcount
from laminar_cluster.clock import RealClock
from laminar_cluster.store import CREATE, open_store
from laminar_cluster.views.status import StatusReader, StatusView, event_log_opener
from tests.examples.support import job_fleet, query, wait_for

pytestmark = [pytest.mark.processes]


def _word(n: int) -> str:
    """Word n: letters only ("waa", "wab", ...), as the job's words are."""
    return "w" + "".join(chr(ord("a") + n // 26**k % 26) for k in range(2))


VOCABULARY = [_word(n) for n in range(400)] + ["it's", "Don't", "THE"]


def books(seed: int, files: int, lines: int = 150) -> dict[str, bytes]:
    """`files` text files of `lines` lines of 3 to 14 words (mixed case, punctuation)."""
    rng = random.Random(seed)
    out = {}
    for number in range(files):
        text = [
            " ".join(rng.choice(VOCABULARY) for _ in range(rng.randrange(3, 15)))
            + rng.choice(".,!")
            for _ in range(lines)
        ]
        out[f"books/{seed:03d}-{number:03d}.txt"] = ("\n".join(text) + "\n").encode()
    return out


def put(url: str, files: dict[str, bytes]) -> None:
    """Land `files` in the store, each one PUT."""

    async def run() -> None:
        store = open_store(url)
        try:
            for key, body in files.items():
                await store.put(key, body, CREATE)
        finally:
            await store.close()

    asyncio.run(run())


def reference(files: dict[str, bytes]) -> Counter[str]:
    """Each word's count over all the files, computed directly."""
    counts: Counter[str] = Counter()
    for body in files.values():
        counts.update(wordcount.WORD.findall(body.decode().lower()))
    return counts


def test_fs2_fs3_wordcount_over_files_equals_the_reference_under_rebalance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("LAMINAR_EXAMPLE_OUT", str(out))
    url = f"file://{tmp_path}/store?fsync=false"
    early, during, late = books(1, 8), books(2, 4), books(3, 4)
    expected = reference(early | during | late)
    table = f"read_parquet('{out}/wordcount/**/*.parquet')"

    def counts() -> dict[str, int]:
        return dict(query(f"select word, max(count) from {table} group by word"))

    def total() -> int:
        return sum(counts().values())

    put(url, early)
    with job_fleet(url, tmp_path, "examples.wordcount:job", (1, 2)) as fleet:
        wait_for(fleet, "some words counted", lambda: total() > 0, timeout_s=60)
        put(url, during)
        fleet.start(3, ["--job", "examples.wordcount:job"])  # a join
        fleet.signal(1, signal.SIGKILL).process.wait(timeout=10)
        fleet.start(1, ["--job", "examples.wordcount:job"])
        wait_for(
            fleet,
            "words of the later files",
            lambda: total() > sum(reference(early).values()),
            timeout_s=90,
        )
        fleet.signal(2, signal.SIGTERM)  # a graceful leave
        put(url, late)
        wait_for(
            fleet, "every word counted", lambda: total() >= sum(expected.values()), timeout_s=120
        )
        view = asyncio.run(_status(url))
    assert counts() == dict(expected)
    assert len(expected) == len(VOCABULARY)  # every word of the vocabulary is in the books
    # status counts the record log's events, not the splits' file positions (seq << 32 | n)
    assert view.checkpoint is not None and 0 < view.checkpoint["committed_events"] < 2**32
    assert len(view.lag["partitions"]) == 256  # the record log's partitions only


async def _status(url: str) -> StatusView:
    store = open_store(url)
    try:
        clock = RealClock()
        return await StatusReader(store, clock, event_log_opener(clock)).read(timeout_s=10.0)
    finally:
        await store.close()
