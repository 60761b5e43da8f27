"""Polars and pandas read the file sinks' files as they are, from the plain directory the sinks
write (docs/protocols/file-sink.md, "Readers"; DuckDB's reads are in test_file_directory.py):
every record comes back, field for field, in key order (checkpoint, node) then emit order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
from laminar_cluster.store import open_store
from tests.connectors.support import JOB, canonical, deadline, delivery

PREFIX = "out/clicks/"
IDS = [(c, n) for c in (4, 7, 12) for n in (1, 2, 17)]  # the first file is of an even checkpoint
Sink = ParquetSink | JsonLinesSink


def window_records(checkpoint_id: int, node_id: int) -> list[dict[str, Any]]:
    """Records of one shape (every field in every record, no nulls), like a window's output."""
    return [
        {
            "user": f"u{(checkpoint_id * node_id + i) % 7}",
            "window_start_ms": 60_000 * (checkpoint_id + i),
            "clicks": checkpoint_id * 1000 + node_id * 10 + i,
            "mean_gap_s": (i + 0.25) * node_id,
            "closed": i % 2 == 0,
        }
        for i in range(node_id % 3 + 1)
    ]


def write(sink_type: type[Sink], deliveries: list[Delivery], tmp_path: Path, file_url: str) -> Path:
    """Deliver `deliveries` through a sink of `sink_type` into a plain directory; the directory
    of the sink's prefix."""
    root = tmp_path / "plain"

    async def run() -> None:
        writer = sink_type(PREFIX, url=str(root)).open(open_store(file_url), RealClock())
        for item in deliveries:
            assert await writer.deliver(item, deadline=deadline())

    asyncio.run(run())
    return root / PREFIX


def one_shape() -> list[Delivery]:
    return [Delivery(JOB, c, n, window_records(c, n)) for c, n in IDS]


def in_key_order(deliveries: Sequence[Delivery]) -> list[dict[str, Any]]:
    """The records as a reader of the files in key order returns them."""
    return [dict(r) for d in sorted(deliveries, key=_key) for r in d.records]


def checkpoint_column(deliveries: Sequence[Delivery]) -> list[int]:
    """The hive partition column `checkpoint` a directory read adds, row by row."""
    return [d.checkpoint_id for d in sorted(deliveries, key=_key) for _ in d.records]


def _key(item: Delivery) -> tuple[int, int]:
    return (item.checkpoint_id, item.node_id)


def test_polars_reads_the_parquet_files_by_glob_and_by_directory(
    tmp_path: Path, file_url: str
) -> None:
    deliveries = one_shape()
    directory = write(ParquetSink, deliveries, tmp_path, file_url)
    expected = in_key_order(deliveries)
    assert pl.read_parquet(f"{directory}/**/*.parquet").to_dicts() == expected
    frame = pl.read_parquet(directory)  # a directory: hive partitioning adds `checkpoint`
    assert frame.get_column("checkpoint").to_list() == checkpoint_column(deliveries)
    assert frame.drop("checkpoint").to_dicts() == expected


def test_polars_reads_the_json_lines_files_by_glob_and_by_directory(
    tmp_path: Path, file_url: str
) -> None:
    deliveries = one_shape()
    directory = write(JsonLinesSink, deliveries, tmp_path, file_url)
    expected = in_key_order(deliveries)
    assert pl.read_ndjson(f"{directory}/**/*.jsonl").to_dicts() == expected
    assert pl.read_ndjson(directory).to_dicts() == expected


def test_pandas_reads_the_parquet_files_by_directory_and_by_glob(
    tmp_path: Path, file_url: str
) -> None:
    deliveries = one_shape()
    directory = write(ParquetSink, deliveries, tmp_path, file_url)
    expected = in_key_order(deliveries)
    frame = pd.read_parquet(directory)  # pyarrow's dataset: hive partitioning adds `checkpoint`
    assert frame.pop("checkpoint").astype(int).tolist() == checkpoint_column(deliveries)
    assert frame.to_dict("records") == expected
    files = sorted(directory.glob("*/*.parquet"))
    assert len(files) == len(IDS)
    assert pd.read_parquet(files).drop(columns="checkpoint").to_dict("records") == expected


def test_pandas_reads_the_json_lines_files_of_the_directory(tmp_path: Path, file_url: str) -> None:
    deliveries = one_shape()
    directory = write(JsonLinesSink, deliveries, tmp_path, file_url)
    files = sorted(directory.glob("*/*.jsonl"))
    assert len(files) == len(IDS)
    frame = pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True)
    assert frame.to_dict("records") == in_key_order(deliveries)


# Files whose columns differ (`tag` only in odd checkpoints, so not in the first file; `extra`
# nested and null in each file's first record): each reader needs its union-by-name form.


def test_polars_reads_files_whose_columns_differ_given_the_schema(
    tmp_path: Path, file_url: str
) -> None:
    deliveries = [delivery(c, n, count=n + 2) for c, n in IDS]
    expected = canonical(in_key_order(deliveries))
    schema = {
        "user": pl.String,
        "clicks": pl.Int64,
        "score": pl.Float64,
        "tag": pl.String,
        "extra": pl.Struct({"depth": pl.Int64, "path": pl.List(pl.String)}),
    }
    parquet = write(ParquetSink, deliveries, tmp_path / "parquet", file_url)
    frame = pl.read_parquet(f"{parquet}/**/*.parquet", schema=schema, missing_columns="insert")
    assert canonical(frame.to_dicts()) == expected
    json_lines = write(JsonLinesSink, deliveries, tmp_path / "jsonl", file_url)
    assert canonical(pl.read_ndjson(json_lines, schema=schema).to_dicts()) == expected


def test_pandas_reads_files_whose_columns_differ_file_by_file(
    tmp_path: Path, file_url: str
) -> None:
    deliveries = [delivery(c, n, count=n + 2) for c, n in IDS]
    expected = canonical(in_key_order(deliveries))
    parquet = write(ParquetSink, deliveries, tmp_path / "parquet", file_url)
    frames = [
        pd.read_parquet(f, dtype_backend="pyarrow") for f in sorted(parquet.rglob("*.parquet"))
    ]
    assert canonical(pd.concat(frames).to_dict("records")) == expected
    json_lines = write(JsonLinesSink, deliveries, tmp_path / "jsonl", file_url)
    frames = [
        pd.read_json(f, lines=True, engine="pyarrow", dtype_backend="pyarrow")
        for f in sorted(json_lines.rglob("*.jsonl"))
    ]
    assert canonical(pd.concat(frames).to_dict("records")) == expected
