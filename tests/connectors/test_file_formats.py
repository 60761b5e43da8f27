"""Reading whole input files as events (connectors/file_formats.py): each format, a bad record
yielding exactly one non-object record in its place, format_of's rules and the size limit."""

from __future__ import annotations

import datetime
import decimal
import io
import subprocess
import sys
from typing import Any

import msgspec
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from laminar_cluster.connectors import file_formats
from laminar_cluster.connectors.eventlog_records import EVENT_RECORD_BYTES_MAX
from laminar_cluster.connectors.file_formats import (
    FILE_BYTES_MAX,
    FILE_FORMATS,
    format_of,
    parse_file,
)
from laminar_cluster.errors import InvalidArgument


def is_object(record: bytes) -> bool:
    """Whether `record` is the bytes of one JSON object, as the job's reader decides."""
    try:
        return type(msgspec.json.decode(record)) is dict
    except (msgspec.DecodeError, RecursionError):
        return False


def objects(records: list[bytes]) -> list[Any]:
    """Each record decoded (asserting it is an object and in msgspec's compact form)."""
    decoded = [msgspec.json.decode(record) for record in records]
    assert all(type(value) is dict for value in decoded)
    assert [msgspec.json.encode(value) for value in decoded] == records
    return decoded


def parquet_bytes(table: Any) -> bytes:
    """`table` written as a Parquet file."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


# --- format_of -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("in/a.jsonl", "jsonl"),
        ("in/a.ndjson", "jsonl"),
        ("in/a.json", "jsonl"),
        ("in/a.CSV", "csv"),
        ("in/dt=2024-01-01/part.0.parquet", "parquet"),
        ("in/a.txt", "text"),
        ("in/a.log", "text"),
        ("in/a.text", "text"),
    ],
)
def test_format_of_reads_the_extension(name: str, fmt: str) -> None:
    assert format_of(name, None) == fmt


def test_format_of_prefers_the_declared_format() -> None:
    assert format_of("in/a.csv", "text") == "text"
    assert format_of("in/no-extension", "jsonl") == "jsonl"


@pytest.mark.parametrize("name", ["in/a.gz", "in/a.jsonl.gz", "in/no-extension", "in.d/a"])
def test_format_of_refuses_an_unknown_extension_and_says_to_pass_format(name: str) -> None:
    with pytest.raises(InvalidArgument, match=r"format=\.\.\."):
        format_of(name, None)


def test_format_of_refuses_an_unknown_declared_format() -> None:
    with pytest.raises(InvalidArgument, match="'xml'"):
        format_of("in/a.jsonl", "xml")
    with pytest.raises(InvalidArgument):
        parse_file("xml", "in/a.xml", b"")


# --- size limit ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_a_file_above_the_size_limit_is_refused_naming_it_and_its_size(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_formats, "FILE_BYTES_MAX", 10)
    parse_file(fmt, "in/a", b"0123456789")  # at the limit: read (a bad record, not refused)
    with pytest.raises(InvalidArgument, match=r"in/big: file is 11 bytes; maximum is 10"):
        parse_file(fmt, "in/big", b'{"a": 1}\n\n\n')
    assert FILE_BYTES_MAX == 256 * 1024 * 1024


# --- jsonl ---------------------------------------------------------------------------------


def test_jsonl_yields_each_object_line_compact_in_file_order() -> None:
    data = b'{"b": 2, "a": [1, 2]}\r\n\n   \n{"x":"\xc3\xa9"}\n{ "n" : null }'
    records = parse_file("jsonl", "in/a.jsonl", data)
    assert records == [b'{"b":2,"a":[1,2]}', b'{"x":"\xc3\xa9"}', b'{"n":null}']


def test_jsonl_skips_a_leading_byte_order_mark() -> None:
    assert parse_file("jsonl", "in/a.jsonl", b'\xef\xbb\xbf{"a":1}\n') == [b'{"a":1}']


@pytest.mark.parametrize(
    "bad",
    [b"[1, 2]", b'"text"', b"17", b"null", b"{not json", b'{"a": 1} {"b": 2}', b'{"a":"\xff"}'],
)
def test_a_bad_jsonl_line_yields_its_own_bytes_in_place(bad: bytes) -> None:
    data = b'{"i":1}\n' + bad + b'\r\n{"i":2}\n'
    records = parse_file("jsonl", "in/a.jsonl", data)
    assert records == [b'{"i":1}', bad, b'{"i":2}']
    assert not is_object(records[1])


def test_a_jsonl_record_above_the_event_limit_yields_a_marker_naming_its_line() -> None:
    big = msgspec.json.encode({"s": "x" * EVENT_RECORD_BYTES_MAX})
    data = b'{"i":1}\n\n' + big + b"\n" + b"x" * (EVENT_RECORD_BYTES_MAX + 1) + b'\n{"i":2}'
    records = parse_file("jsonl", "in/a.jsonl", data)
    assert len(records) == 4
    assert records[0] == b'{"i":1}' and records[3] == b'{"i":2}'
    assert records[1].startswith(b"file in/a.jsonl: line 3 is ")
    assert records[2].startswith(b"file in/a.jsonl: line 4 is ")
    assert not is_object(records[1]) and not is_object(records[2])


def test_a_jsonl_line_nested_too_deeply_to_decode_yields_a_marker_in_place() -> None:
    deep = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    records = parse_file("jsonl", "in/a.jsonl", b'{"i":1}\n' + deep + b'\n{"i":2}\n')
    assert len(records) == 3
    assert records[0] == b'{"i":1}' and records[2] == b'{"i":2}'
    assert records[1] == b"file in/a.jsonl: line 2 is nested deeper than JSON is read"


# --- csv -----------------------------------------------------------------------------------


def test_csv_yields_one_object_of_strings_per_row_under_the_header() -> None:
    data = b'\xef\xbb\xbfuser,n,note\r\nu1,3,\r\n\r\nu2,04,"a, ""b""\nc"\r\n'
    records = parse_file("csv", "in/a.csv", data)
    assert objects(records) == [
        {"user": "u1", "n": "3", "note": ""},
        {"user": "u2", "n": "04", "note": 'a, "b"\nc'},
    ]


@pytest.mark.parametrize("data", [b"", b"\r\n\n", b"user,n\n"])
def test_a_csv_without_rows_yields_nothing(data: bytes) -> None:
    assert parse_file("csv", "in/a.csv", data) == []


def test_a_csv_row_with_another_field_count_yields_a_marker_in_place() -> None:
    data = b"a,b,c,d\n1,2,3,4\n1,2,3\n5,6,7,8\n"
    records = parse_file("csv", "in/a.csv", data)
    assert len(records) == 3
    assert objects([records[0], records[2]]) == [
        {"a": "1", "b": "2", "c": "3", "d": "4"},
        {"a": "5", "b": "6", "c": "7", "d": "8"},
    ]
    assert records[1] == b"file in/a.csv: csv row 3 has 3 fields, header has 4"
    assert not is_object(records[1])


def test_a_csv_that_is_not_utf8_yields_one_marker_naming_the_file() -> None:
    records = parse_file("csv", "in/latin.csv", b"name\ncaf\xe9\n")
    assert len(records) == 1
    assert records[0].startswith(b"file in/latin.csv: csv is not UTF-8")
    assert not is_object(records[0])


def test_a_csv_row_above_the_event_limit_yields_a_marker_in_place() -> None:
    data = b"a\n1\n" + b"x" * (EVENT_RECORD_BYTES_MAX + 1) + b"\n2\n"
    records = parse_file("csv", "in/a.csv", data)
    assert len(records) == 3
    assert objects([records[0], records[2]]) == [{"a": "1"}, {"a": "2"}]
    assert records[1].startswith(b"file in/a.csv: csv row 3 ")
    assert not is_object(records[1])


# --- text ----------------------------------------------------------------------------------


def test_text_yields_one_object_per_non_blank_line() -> None:
    data = b"the cat\r\n\n  \r\n  sat on\t\nthe m\xffat"
    records = parse_file("text", "in/a.txt", data)
    assert objects(records) == [
        {"text": "the cat"},
        {"text": "  sat on\t"},
        {"text": "the m\ufffdat"},
    ]


def test_a_text_line_above_the_event_limit_yields_a_marker_in_place() -> None:
    data = b"a\n" + b"x" * EVENT_RECORD_BYTES_MAX + b"\nb"
    records = parse_file("text", "in/a.txt", data)
    assert len(records) == 3
    assert objects([records[0], records[2]]) == [{"text": "a"}, {"text": "b"}]
    assert records[1].startswith(b"file in/a.txt: line 2 is ")
    assert not is_object(records[1])


# --- parquet -------------------------------------------------------------------------------


def test_parquet_yields_one_object_per_row_with_temporal_decimal_and_bytes_as_strings() -> None:
    utc = datetime.UTC
    table = pa.table(
        {
            "user": ["u1", "u2", None],
            "n": pa.array([1, None, 3], pa.int64()),
            "at": pa.array(
                [datetime.datetime(2024, 5, 1, 12, 30, 0, 250000, utc), None, None],
                pa.timestamp("ms", tz="UTC"),
            ),
            "at_ns": pa.array([1_700_000_000_123_456_789, 0, None], pa.timestamp("ns")),
            "day": [datetime.date(2024, 5, 1), None, None],
            "price": pa.array(
                [decimal.Decimal("1.50"), decimal.Decimal("-20.00"), None], pa.decimal128(6, 2)
            ),
            "blob": [b"ab", b"", None],
            "ratio": [0.5, float("nan"), None],
            "nested": [{"tags": ["a"], "ok": True}, None, None],
        }
    )
    records = parse_file("parquet", "in/a.parquet", parquet_bytes(table))
    assert objects(records) == [
        {
            "user": "u1",
            "n": 1,
            "at": "2024-05-01T12:30:00.250000Z",
            "at_ns": "2023-11-14T22:13:20.123456",
            "day": "2024-05-01",
            "price": "1.50",
            "blob": "YWI=",
            "ratio": 0.5,
            "nested": {"tags": ["a"], "ok": True},
        },
        {
            "user": "u2",
            "n": None,
            "at": None,
            "at_ns": "1970-01-01T00:00:00",
            "day": None,
            "price": "-20.00",
            "blob": "",
            "ratio": None,
            "nested": None,
        },
        {
            "user": None,
            "n": 3,
            "at": None,
            "at_ns": None,
            "day": None,
            "price": None,
            "blob": None,
            "ratio": None,
            "nested": None,
        },
    ]


def test_parquet_nanosecond_timestamps_nested_in_a_struct_are_iso_strings() -> None:
    kind = pa.struct([("at", pa.timestamp("ns", tz="UTC"))])
    table = pa.table({"s": pa.array([{"at": 1_700_000_000_123_456_000}], kind)})
    records = parse_file("parquet", "in/a.parquet", parquet_bytes(table))
    assert objects(records) == [{"s": {"at": "2023-11-14T22:13:20.123456Z"}}]


@pytest.mark.parametrize("data", [b"", b"PAR1", b'{"a":1}\n', b"PAR1" + b"\0" * 100 + b"PAR1"])
def test_bytes_that_are_not_parquet_yield_one_marker_naming_the_file(data: bytes) -> None:
    records = parse_file("parquet", "in/{odd}.parquet", data)
    assert len(records) == 1
    assert records[0].startswith(b"file in/{odd}.parquet: cannot be read as Parquet")
    assert not is_object(records[0])


def test_a_parquet_row_above_the_event_limit_yields_a_marker_in_place() -> None:
    table = pa.table({"s": ["a", "x" * EVENT_RECORD_BYTES_MAX, "b"]})
    records = parse_file("parquet", "in/a.parquet", parquet_bytes(table))
    assert len(records) == 3
    assert objects([records[0], records[2]]) == [{"s": "a"}, {"s": "b"}]
    assert records[1].startswith(b"file in/a.parquet: parquet row 2 is ")
    assert not is_object(records[1])


def test_importing_the_module_loads_no_pyarrow() -> None:
    code = "import sys, laminar_cluster.connectors.file_formats; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
