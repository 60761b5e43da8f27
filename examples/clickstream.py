"""Clicks per user per minute, with late clicks kept aside.

Run it (a store, events in, nodes with the job, results in a plain directory DuckDB reads):

    laminar-cluster produce --store file:///tmp/shop --file clicks.jsonl --key user
    LAMINAR_EXAMPLE_OUT=/tmp/shop-results \\
        laminar-cluster node --store file:///tmp/shop --node-id 1 --job examples.clickstream:job
    duckdb -c "select user, window_start_ms, clicks
               from read_parquet('/tmp/shop-results/clickstream/minutes/**/*.parquet')"

A click is `{"user": "u17", "ts_ms": 1733200000000, "page": "/cart"}`. Clicks arrive up to
5 s out of order; a click later than that for its minute goes to `clickstream/late/` (JSON
Lines), counted, never dropped. With `LAMINAR_EXAMPLE_PG` set to a PostgreSQL DSN the minutes
are also upserted into the table `clicks_per_minute`, exactly once.
"""

from __future__ import annotations

import os
import random
from typing import Any

from laminar_cluster import (
    Count,
    EventLogSource,
    Job,
    JsonLinesSink,
    ParquetSink,
    PostgresSink,
    Tumbling,
)

OUT = os.environ.get("LAMINAR_EXAMPLE_OUT", "/tmp/laminar-examples")
PG = os.environ.get("LAMINAR_EXAMPLE_PG")
OUT_OF_ORDER_MS = 5_000
MINUTE_MS = 60_000

job = (
    Job("clickstream")
    .source(EventLogSource())
    .key_by(lambda click: click["user"], name="user")
    .event_time(lambda click: click["ts_ms"], out_of_orderness_ms=OUT_OF_ORDER_MS)
    .window(Tumbling(size_ms=MINUTE_MS), Count(name="clicks"))
    .sink(ParquetSink("clickstream/minutes/", url=OUT))
    .sink(JsonLinesSink("clickstream/late/", url=OUT, stream="late"))
)
if PG:
    job = job.sink(
        PostgresSink(
            dsn=PG,
            table="clicks_per_minute",
            columns={
                "user": "text",
                "window_start_ms": "bigint",
                "window_end_ms": "bigint",
                "clicks": "bigint",
            },
            key=("user", "window_start_ms"),
        )
    )


def clicks(seed: int, count: int, users: int = 40) -> list[dict[str, Any]]:
    """`count` clicks over `users` users, a few seconds apart; about 1 in 50 arrives two
    minutes late (it will be late for its window), the rest at most 3 s out of order."""
    rng = random.Random(seed)
    start_ms = 1_733_200_000_000
    out = []
    for i in range(count):
        ts_ms = start_ms + i * 150 - rng.randrange(3_000)
        if rng.random() < 0.02:
            ts_ms -= 2 * MINUTE_MS
        user = f"u{rng.randrange(users)}"
        out.append({"user": user, "ts_ms": ts_ms, "page": rng.choice(["/", "/cart", "/buy"])})
    return out
