"""Reading one whole input file of a file source as the job's events (pure, synchronous,
CPU-bound).

`parse_file(fmt, name, data)` returns the file's records in file order, each the bytes of one
JSON object as `msgspec.json.encode(dict)` writes it (compact), at most
EVENT_RECORD_BYTES_MAX bytes:

* jsonl: one record per non-blank line (a trailing `\\r` is dropped; a leading UTF-8 BOM is
  skipped). A line that parses as a JSON object becomes its msgspec re-encoding.
* csv (stdlib `csv`, UTF-8 with an optional BOM): the first row is the header; each later row
  is `{header: value}` with every value a str (an empty field stays `""`). Blank rows yield
  nothing; a file without a header yields no records. Rows are numbered from 1, the header
  being row 1, as a spreadsheet shows them.
* parquet (pyarrow, imported here only): one record per row, rows numbered from 1. Values JSON
  cannot hold are written as msgspec writes them: datetimes as RFC 3339 strings (`Z` for UTC,
  no offset for naive ones), dates and times as ISO 8601 strings, durations as ISO 8601
  durations (`PT3S`), Decimal as a str (`"1.50"`), bytes as a base64 str, NaN and infinities
  as null. Nanosecond timestamps, times and durations of top-level columns are truncated to
  microseconds (Python's datetime holds no finer unit).
* text: one record `{"text": line}` per line that is not blank (UTF-8, an undecodable byte
  becomes U+FFFD; the line is kept as it is, without its `\\n` or `\\r\\n`).

A record that cannot be one (a jsonl line that does not parse or is not an object, a csv row
whose field count differs from the header's, a record above EVENT_RECORD_BYTES_MAX, a csv file
that is not UTF-8, bytes that are not Parquet) yields, in its place, one record that is not a
JSON object, so the job's reader dead-letters it and its neighbours stay as they are: a bad
jsonl line's own bytes (a line nested too deeply for msgspec gets a marker instead, as
it may be a valid object), otherwise a marker starting with `file ` that names the file, the
line or row, and the fault. A csv or parquet file that cannot be read at all yields one marker.
"""

from __future__ import annotations

import codecs
import csv
import datetime
import io
import posixpath
from typing import Any, Final

import msgspec

from laminar_cluster.connectors.eventlog_records import EVENT_RECORD_BYTES_MAX
from laminar_cluster.errors import InvalidArgument

FILE_FORMATS: Final = ("jsonl", "csv", "parquet", "text")
# The most bytes one input file may have: each file is read whole into memory.
FILE_BYTES_MAX: Final = 256 * 1024 * 1024

_FORMAT_OF_EXTENSION: Final = {
    "jsonl": "jsonl",
    "ndjson": "jsonl",
    "json": "jsonl",
    "csv": "csv",
    "parquet": "parquet",
    "txt": "text",
    "log": "text",
    "text": "text",
}
_DECODER: Final = msgspec.json.Decoder()
_ENCODER: Final = msgspec.json.Encoder()


def format_of(name: str, declared: str | None) -> str:
    """The format of the file `name`: `declared` if given (InvalidArgument if it is not one of
    FILE_FORMATS), else the one its extension names (case-insensitive); InvalidArgument for
    another extension."""
    if declared is not None:
        if declared not in FILE_FORMATS:
            raise InvalidArgument(
                f"{name}: format {declared!r} is not one of {', '.join(FILE_FORMATS)}"
            )
        return declared
    extension = posixpath.splitext(posixpath.basename(name))[1].lower().removeprefix(".")
    fmt = _FORMAT_OF_EXTENSION.get(extension)
    if fmt is None:
        known = ", ".join(f".{known}" for known in _FORMAT_OF_EXTENSION)
        raise InvalidArgument(
            f"{name}: extension {extension!r} names no format (known: {known});"
            f" pass format=... (one of {', '.join(FILE_FORMATS)})"
        )
    return fmt


def parse_file(fmt: str, name: str, data: bytes) -> list[bytes]:
    """The records of the file `name` holding `data`, in file order (see the module's
    docstring); InvalidArgument for a format not in FILE_FORMATS or a file above
    FILE_BYTES_MAX bytes."""
    if len(data) > FILE_BYTES_MAX:
        raise InvalidArgument(f"{name}: file is {len(data)} bytes; maximum is {FILE_BYTES_MAX}")
    if fmt == "jsonl":
        return _parse_jsonl(name, data)
    if fmt == "csv":
        return _parse_csv(name, data)
    if fmt == "parquet":
        return _parse_parquet(name, data)
    if fmt == "text":
        return _parse_text(name, data)
    raise InvalidArgument(f"{name}: format {fmt!r} is not one of {', '.join(FILE_FORMATS)}")


def _marker(name: str, fact: str) -> bytes:
    """A record that is not a JSON object (it starts with `file `), naming the file and fault."""
    return f"file {name}: {fact}".encode(errors="backslashreplace")


def _bounded(name: str, where: str, record: bytes) -> bytes:
    if len(record) > EVENT_RECORD_BYTES_MAX:
        return _marker(name, f"{where} is {len(record)} bytes; maximum is {EVENT_RECORD_BYTES_MAX}")
    return record


def _parse_jsonl(name: str, data: bytes) -> list[bytes]:
    decode, encode = _DECODER.decode, _ENCODER.encode
    records: list[bytes] = []
    append = records.append
    for index, line in enumerate(data.removeprefix(codecs.BOM_UTF8).split(b"\n")):
        try:
            value = decode(line)  # JSON whitespace includes a trailing \r
        except msgspec.DecodeError:
            value = None
        except RecursionError:  # valid JSON maybe, but no reader here can take it
            append(_marker(name, f"line {index + 1} is nested deeper than JSON is read"))
            continue
        if type(value) is dict:
            record = encode(value)
        elif line.strip():
            record = line.removesuffix(b"\r")  # not an object: a later stage dead-letters it
        else:
            continue
        if len(record) > EVENT_RECORD_BYTES_MAX:
            record = _bounded(name, f"line {index + 1}", record)
        append(record)
    return records


def _parse_csv(name: str, data: bytes) -> list[bytes]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return [_marker(name, f"csv is not UTF-8 (byte {error.start}: {error.reason})")]
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    records: list[bytes] = []
    row_number = 0
    while True:
        row_number += 1
        try:
            row = next(reader)
        except StopIteration:
            return records
        except csv.Error as error:  # the reader goes on at the next line
            records.append(_marker(name, f"csv row {row_number} cannot be read: {error}"))
            continue
        if not row:
            continue  # a blank line
        if header is None:
            header = row
        elif len(row) != len(header):
            fact = f"csv row {row_number} has {len(row)} fields, header has {len(header)}"
            records.append(_marker(name, fact))
        else:
            record = _ENCODER.encode(dict(zip(header, row, strict=True)))
            records.append(_bounded(name, f"csv row {row_number}", record))


def _parse_text(name: str, data: bytes) -> list[bytes]:
    encode = _ENCODER.encode
    records: list[bytes] = []
    for index, line in enumerate(data.decode("utf-8", errors="replace").split("\n")):
        if line.strip():
            record = encode({"text": line.removesuffix("\r")})
            records.append(_bounded(name, f"line {index + 1}", record))
    return records


def _plain_temporal(value: Any) -> Any:
    """msgspec's enc_hook: a subclass of a datetime type (pandas' Timestamp, which pyarrow gives
    for nanosecond values inside nested columns when pandas is installed) as the base type."""
    if isinstance(value, datetime.datetime):
        return datetime.datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond, value.tzinfo,
        )  # fmt: skip
    if isinstance(value, datetime.date):
        return datetime.date(value.year, value.month, value.day)
    if isinstance(value, datetime.timedelta):
        return datetime.timedelta(value.days, value.seconds, value.microseconds)
    raise NotImplementedError(f"a value of type {type(value).__name__} has no JSON form")


_PARQUET_ENCODER: Final = msgspec.json.Encoder(enc_hook=_plain_temporal)


def _parse_parquet(name: str, data: bytes) -> list[bytes]:
    import pyarrow as pa  # type: ignore[import-untyped]  # the optional `parquet` extra
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    encode = _PARQUET_ENCODER.encode
    records: list[bytes] = []
    row_number = 0
    try:
        parquet = pq.ParquetFile(io.BytesIO(data))
        schema = _microsecond_schema(pa, parquet.schema_arrow)
        for batch in parquet.iter_batches():
            for row in batch.cast(schema, safe=False).to_pylist():
                row_number += 1
                try:
                    record = encode(row)
                except (
                    msgspec.EncodeError,
                    NotImplementedError,
                    RecursionError,
                    TypeError,
                ) as error:
                    records.append(_marker(name, f"parquet row {row_number}: {error}"))
                    continue
                records.append(_bounded(name, f"parquet row {row_number}", record))
    except (pa.ArrowException, OSError, ValueError, TypeError) as error:
        where = f"after row {row_number}" if row_number else "before its first row"
        fault = f"{type(error).__name__}: {error}"
        records.append(_marker(name, f"cannot be read as Parquet {where} ({fault})"))
    return records


def _microsecond_schema(pa: Any, schema: Any) -> Any:
    """`schema` with each top-level nanosecond timestamp, time or duration in microseconds."""
    fields = []
    for field in schema:
        kind = field.type
        if pa.types.is_timestamp(kind) and kind.unit == "ns":
            field = field.with_type(pa.timestamp("us", tz=kind.tz))
        elif pa.types.is_time64(kind) and kind.unit == "ns":
            field = field.with_type(pa.time64("us"))
        elif pa.types.is_duration(kind) and kind.unit == "ns":
            field = field.with_type(pa.duration("us"))
        fields.append(field)
    return pa.schema(fields, metadata=schema.metadata)
