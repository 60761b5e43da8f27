"""Encoding one delivery's records as the bytes of one file (pure, synchronous, CPU-bound;
`encode_within` runs it in a worker thread under a deadline, for the writers).

* Parquet (pyarrow, the `parquet` extra): one column per record field, in the order the
  fields first appear; a record without a field has null there. Column types are inferred per
  file, so two files of one sink can differ in columns or types: read them by name (DuckDB
  `read_parquet(..., union_by_name=true)`, Polars with `schema=` and
  `missing_columns="insert"`, pandas file by file then `pd.concat`; file-sink.md, "Readers").
  A field whose values have no common Arrow type (an int and a str), or an int beyond int64,
  cannot be written and raises InvalidArgument: use the JSON Lines sink for such records.
* JSON Lines: one compact UTF-8 JSON object per line, each line ending in a newline
  (msgspec.json; NaN and infinities become null, as in msgspec).

Records are written as they are: no columns are added (the key names the checkpoint and node).
"""

from __future__ import annotations

import asyncio
import enum
import io
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from laminar_cluster.clock import Clock
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument

# The most bytes one file may have: S3's limit for one PUT (larger objects need multipart
# uploads, which are not atomic create-only writes on every store).
FILE_BYTES_MAX: Final = 5 * 1024**3
PARQUET_COMPRESSION: Final = "zstd"  # read by DuckDB, Polars, pandas/pyarrow, Spark >= 3.2

_ENCODER: Final = msgspec.json.Encoder()


class FileFormat(enum.Enum):
    """The file formats of the file sinks; the value is the key's extension."""

    PARQUET = "parquet"
    JSON_LINES = "jsonl"

    @property
    def extension(self) -> str:
        """The key's extension, without the dot."""
        return self.value


def encode_file(
    file_format: FileFormat, records: Sequence[Mapping[str, Any]], *, key: str
) -> bytes:
    """The bytes of the file that holds `records` (non-empty) in `file_format`; InvalidArgument
    (naming `key`) for records the format cannot hold or a file above FILE_BYTES_MAX."""
    if not records:
        raise InvalidArgument(f"{key}: no records to encode; an empty delivery writes no file")
    if file_format is FileFormat.PARQUET:
        body = encode_parquet(records, key=key)
    else:
        body = encode_json_lines(records, key=key)
    if len(body) > FILE_BYTES_MAX:
        raise InvalidArgument(f"{key}: file is {len(body)} bytes; maximum is {FILE_BYTES_MAX}")
    return body


async def encode_within(
    clock: Clock,
    file_format: FileFormat,
    records: Sequence[Mapping[str, Any]],
    *,
    key: str,
    deadline: float,
) -> bytes:
    """`encode_file` in a worker thread; DeadlineExceeded if `deadline` passes first (the
    thread then finishes on its own and its result is dropped)."""
    if clock.monotonic() >= deadline:
        raise DeadlineExceeded(f"{key}: deadline passed before encoding")
    try:
        async with clock.timeout_at(deadline):
            return await asyncio.to_thread(encode_file, file_format, records, key=key)
    except TimeoutError as error:
        raise DeadlineExceeded(f"{key}: deadline passed while encoding") from error


def encode_json_lines(records: Sequence[Mapping[str, Any]], *, key: str) -> bytes:
    """One JSON object per record, each on its own newline-terminated line."""
    plain = records if all(type(r) is dict for r in records) else [dict(r) for r in records]
    try:
        return _ENCODER.encode_lines(plain)
    except (TypeError, ValueError, msgspec.EncodeError) as error:
        raise InvalidArgument(f"{key}: a record cannot be encoded as JSON: {error}") from error


def encode_parquet(records: Sequence[Mapping[str, Any]], *, key: str) -> bytes:
    """A Parquet file (zstd) with one row per record, columns in order of first appearance."""
    import pyarrow as pa  # type: ignore[import-untyped]  # the optional `parquet` extra
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    names = list(dict.fromkeys(itertools.chain.from_iterable(records)))
    columns: dict[str, Any] = {}
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgument(f"{key}: field name {name!r} is not a str")
        values = [record.get(name) for record in records]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as error:
            raise InvalidArgument(
                f"{key}: field {name!r} has no Parquet type ({type(error).__name__}: {error})"
            ) from error
    if not columns:
        raise InvalidArgument(f"{key}: no record has a field; a Parquet file needs a column")
    table = pa.table(columns)
    buffer = io.BytesIO()
    try:
        pq.write_table(table, buffer, compression=PARQUET_COMPRESSION)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as error:
        raise InvalidArgument(f"{key}: records cannot be written as Parquet: {error}") from error
    return buffer.getvalue()
