"""The examples run for real (two node processes each, file:// store, results in a plain
directory read by DuckDB, and PostgreSQL) and equal an independent computation: every event
counted once in its window or listed late, nothing lost, nothing twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg
import pytest

from examples import clickstream, sessions
from tests.examples.support import (
    job_fleet,
    produce,
    query,
    sessions_reference,
    tumbling_reference,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.postgres]


def test_clickstream_minutes_and_late_clicks_equal_the_reference(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("LAMINAR_EXAMPLE_OUT", str(out))
    monkeypatch.setenv("LAMINAR_EXAMPLE_PG", postgres_dsn)
    url = f"file://{tmp_path}/store?fsync=false"
    clicks = clickstream.clicks(seed=7, count=6_000)
    produce(url, clicks, "user")
    counts, late = tumbling_reference(
        clicks, "user", clickstream.MINUTE_MS, clickstream.OUT_OF_ORDER_MS
    )
    assert late, "the reference input has late clicks"
    minutes = f"read_parquet('{out}/clickstream/minutes/**/*.parquet', union_by_name=true)"
    late_files = f"read_ndjson_auto('{out}/clickstream/late/**/*.jsonl')"

    def all_out() -> bool:
        counted = query(f"select coalesce(sum(clicks), 0) from {minutes}")
        aside = query(f"select count(*) from {late_files}")
        return bool(counted and aside) and counted[0][0] + aside[0][0] >= len(clicks)

    with job_fleet(url, tmp_path, "examples.clickstream:job", (1, 2)) as fleet:
        wait_for(fleet, "every click counted or late", all_out, timeout_s=120)
    rows = query(f"select user, window_start_ms, clicks from {minutes}")
    assert Counter({(u, s): c for u, s, c in rows}) == counts
    assert len(rows) == len(counts)  # each window once
    aside_rows = query(f"select user, ts_ms from {late_files}")
    assert Counter(aside_rows) == Counter((c["user"], c["ts_ms"]) for c in late)
    with psycopg.connect(postgres_dsn) as connection:
        table = connection.execute(
            'select "user", window_start_ms, clicks from clicks_per_minute'
        ).fetchall()
    assert Counter({(u, s): c for u, s, c in table}) == counts


def test_sessions_equal_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("LAMINAR_EXAMPLE_OUT", str(out))
    monkeypatch.delenv("LAMINAR_EXAMPLE_PG", raising=False)
    url = f"file://{tmp_path}/store?fsync=false"
    views = sessions.views(seed=3)
    produce(url, views, "user")
    expected = sessions_reference(views, "user", sessions.GAP_MS)
    table = f"read_parquet('{out}/sessions/**/*.parquet')"

    def all_out() -> bool:
        found = query(f"select coalesce(sum(views), 0) from {table}")
        return bool(found) and found[0][0] >= len(views)

    with job_fleet(url, tmp_path, "examples.sessions:job", (1, 2)) as fleet:
        wait_for(fleet, "every view in a session", all_out, timeout_s=120)
    rows = query(f"select user, window_start_ms, window_end_ms, views, pages from {table}")
    assert sorted(rows) == expected
