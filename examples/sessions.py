"""Sessionization: each user's visits split into sessions by 30 minutes of inactivity.

    LAMINAR_EXAMPLE_OUT=/tmp/site-results \\
        laminar-cluster node --store file:///tmp/site --node-id 1 --job examples.sessions:job

A session record is `{"user", "window_start_ms" (first view), "window_end_ms" (last view + 30
minutes), "views", "pages"}`, written to `sessions/` as Parquet once the watermark passes its
end; views may arrive up to 10 s out of order.
"""

from __future__ import annotations

import os
import random
from typing import Any

from laminar_cluster import Count, EventLogSource, Job, Max, ParquetSink, Session

OUT = os.environ.get("LAMINAR_EXAMPLE_OUT", "/tmp/laminar-examples")
GAP_MS = 30 * 60_000

job = (
    Job("sessions")
    .source(EventLogSource())
    .key_by(lambda view: view["user"], name="user")
    .event_time(lambda view: view["ts_ms"], out_of_orderness_ms=10_000)
    .window(Session(gap_ms=GAP_MS), Count(name="views"), Max(lambda v: v["page"], name="pages"))
    .sink(ParquetSink("sessions/", url=OUT))
)


def views(seed: int, users: int = 30, sessions: int = 6) -> list[dict[str, Any]]:
    """Page views of `users` users, each in `sessions` bursts of 1 to 12 views a minute or two
    apart, bursts 31 to 240 minutes apart, in time order (so none is late)."""
    rng = random.Random(seed)
    out = []
    for user in range(users):
        ts_ms = 1_733_200_000_000 + rng.randrange(600_000)
        for _ in range(sessions):
            for _ in range(rng.randrange(1, 13)):
                out.append({"user": f"u{user}", "ts_ms": ts_ms, "page": rng.randrange(1, 50)})
                ts_ms += rng.randrange(30_000, 120_000)
            ts_ms += rng.randrange(31, 240) * 60_000
    out.sort(key=lambda view: view["ts_ms"])
    return out
