"""Helpers of the connector tests: deliveries with known records, and DuckDB reads of the
files a sink wrote."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.store import ObjectStore

JOB = "clicks"


def deadline(seconds: float = 30.0) -> float:
    return RealClock().monotonic() + seconds


def records_of(checkpoint_id: int, node_id: int, count: int) -> list[dict[str, Any]]:
    """Records whose fields vary by file: `tag` only in odd checkpoints, `extra` only from the
    second record on (a field pyarrow's from_pylist would drop), nested values in some."""
    records: list[dict[str, Any]] = []
    for i in range(count):
        record: dict[str, Any] = {
            "user": f"u{(checkpoint_id + node_id + i) % 5}",
            "clicks": checkpoint_id * 1000 + node_id * 10 + i,
            "score": (i + 0.5) * node_id,
        }
        if checkpoint_id % 2:
            record["tag"] = f"t{i % 3}"
        if i >= 1:
            record["extra"] = {"depth": i, "path": [f"p{i}", "q"]}
        records.append(record)
    return records


def delivery(checkpoint_id: int, node_id: int, count: int = 4) -> Delivery:
    return Delivery(JOB, checkpoint_id, node_id, records_of(checkpoint_id, node_id, count))


def canonical(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Rows as sorted JSON strings without null fields (a reader's union of columns fills
    absent fields with null), so that multisets of records compare."""
    return sorted(
        json.dumps({k: v for k, v in row.items() if v is not None}, sort_keys=True) for row in rows
    )


async def export(store: ObjectStore, prefix: str, directory: Path) -> list[str]:
    """Copy every object under `prefix` byte for byte to `directory`/<key>; the keys."""
    keys = [meta.key for meta in await store.list(prefix)]
    for key in keys:
        path = directory.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((await store.get(key)).body)
    return keys


def duckdb_rows(sql: str, *params: object) -> list[dict[str, Any]]:
    with duckdb.connect() as connection:
        result = connection.execute(sql, list(params))
        names = [column[0] for column in result.description or ()]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def read_parquet(directory: Path) -> list[dict[str, Any]]:
    return duckdb_rows(
        "SELECT * FROM read_parquet(?, union_by_name=true, hive_partitioning=false)",
        f"{directory}/**/*.parquet",
    )


def read_json_lines(directory: Path) -> list[dict[str, Any]]:
    return duckdb_rows(
        "SELECT * FROM read_ndjson(?, union_by_name=true, hive_partitioning=false)",
        f"{directory}/**/*.jsonl",
    )
