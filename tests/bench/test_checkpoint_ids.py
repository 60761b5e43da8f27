"""`run_bench_checkpoint_ids`, with small counts, on memory:// and file://."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from laminar_cluster.bench.checkpoint_ids import run_bench_checkpoint_ids
from laminar_cluster.store import open_store


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_bench_checkpoint_ids_figures(scheme: str, tmp_path: Path) -> None:
    url = "memory://" if scheme == "memory" else f"file://{tmp_path / 'store'}?fsync=false"
    figures = run_bench_checkpoint_ids(url, local_ids=70_000, shared_ids=40, outcomes=10)
    json.dumps(figures)  # JSON-ready
    assert figures["local_allocations"] == 70_000  # crosses one block boundary
    assert figures["local_allocations_per_s"] > 0
    assert figures["shared_allocations"] == 40
    assert figures["shared_allocations_per_s"] > 0
    # The head is cached with the token of our own CAS: one put per uncontended allocation.
    assert figures["shared_requests_per_allocation"] <= 2
    assert figures["shared_store_requests"] == {"put": 40}
    assert figures["outcome_records"] == 10
    assert 0 < figures["outcome_p50_ms"] <= figures["outcome_p99_ms"]
    assert figures["namespace"].startswith("bench/checkpoint-ids/")
    if scheme == "file":
        # The bench cleans up its namespace.
        listed = asyncio.run(open_store(url).list(figures["namespace"]))
        assert listed == []
