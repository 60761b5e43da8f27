"""The PostgreSQL sink's SQL and its pure helpers: name and type checks, statements, records
turned into statement parameters, and psycopg errors turned into laminar error kinds.

Every value travels as text and is cast in the statement to its column's type (`%s::bigint`),
so PostgreSQL's own input functions judge it: `"12"` and `12` both fit a bigint column, `1.5`
and `true` do not (no silent rounding), and whatever does not fit fails the whole transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import psycopg
from psycopg import sql

from laminar_cluster.errors import (
    DeadlineExceeded,
    InvalidArgument,
    LaminarError,
    StoreUnavailable,
)

IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
# The column types a sink table may declare (normalized: lower case, single spaces).
COLUMN_TYPES: Final = frozenset(
    {"text", "bigint", "integer", "double precision", "boolean", "jsonb", "timestamptz", "numeric"}
)
MARKER_TABLE: Final = "laminar_sink_markers"
# pg_advisory_xact_lock key that serializes this package's CREATE TABLE IF NOT EXISTS (two
# concurrent creators of one table otherwise race on the catalog's unique index).
DDL_LOCK_KEY: Final = 0x6C616D696E6172  # "laminar"
JOB_CHARS_MAX: Final = 256
U64_MAX: Final = (1 << 64) - 1

MARKER_DDL: Final = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {markers} ("
    " job text NOT NULL, sink_table text NOT NULL, node_id numeric(20) NOT NULL,"
    " checkpoint_id numeric(20) NOT NULL, rows bigint NOT NULL,"
    " delivered_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (job, sink_table, node_id, checkpoint_id))"
).format(markers=sql.Identifier(MARKER_TABLE))
MARKER_INSERT: Final = sql.SQL(
    "INSERT INTO {markers} (job, sink_table, node_id, checkpoint_id, rows)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING true"
).format(markers=sql.Identifier(MARKER_TABLE))
MARKER_MAX: Final = sql.SQL(
    "SELECT max(checkpoint_id) FROM {markers} WHERE job = %s AND sink_table = %s"
).format(markers=sql.Identifier(MARKER_TABLE))


def check_identifier(name: object, what: str) -> str:
    """`name` if it is a plain lower-case SQL identifier; InvalidArgument otherwise."""
    if not isinstance(name, str) or IDENTIFIER.match(name) is None:
        raise InvalidArgument(f"{what} {name!r} is not an identifier matching {IDENTIFIER.pattern}")
    return name


def normalized_type(column: str, column_type: object) -> str:
    """`column_type` in lower case with single spaces, if it is in COLUMN_TYPES."""
    normal = " ".join(column_type.lower().split()) if isinstance(column_type, str) else None
    if normal not in COLUMN_TYPES:
        raise InvalidArgument(
            f"column {column}: type {column_type!r} is not one of {sorted(COLUMN_TYPES)}"
        )
    return normal


def table_ddl(table: str, columns: Mapping[str, str], key: Sequence[str]) -> sql.Composed:
    """CREATE TABLE IF NOT EXISTS for the sink's table, its primary key the upsert key."""
    definitions = [
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(column_type))
        for name, column_type in columns.items()
    ]
    return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
        sql.Identifier(table),
        sql.SQL(", ").join(definitions),
        sql.SQL(", ").join(map(sql.Identifier, key)),
    )


def upsert_statement(table: str, columns: Mapping[str, str], key: Sequence[str]) -> sql.Composed:
    """INSERT one row (text parameters cast to the column types) or update the row with its
    key: every non-key column is overwritten, so the last delivery of a key wins."""
    values = [sql.SQL("%s::{}").format(sql.SQL(column_type)) for column_type in columns.values()]
    others = [name for name in columns if name not in key]
    action: sql.Composable
    if others:
        assignments = sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(name)) for name in others
        )
        action = sql.SQL("DO UPDATE SET {}").format(assignments)
    else:
        action = sql.SQL("DO NOTHING")
    return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(values),
        sql.SQL(", ").join(map(sql.Identifier, key)),
        action,
    )


def as_text(value: Any, column_type: str, where: str) -> str | None:
    """The text a column of `column_type` parses `value` from; None for NULL."""
    if value is None:
        return None
    if column_type == "jsonb" or isinstance(value, dict | list | tuple):
        try:
            return msgspec.json.encode(value).decode()
        except (TypeError, msgspec.EncodeError) as error:
            raise InvalidArgument(f"{where}: value is not JSON-encodable: {error}") from None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    raise InvalidArgument(f"{where}: value of type {type(value).__name__} is not a JSON value")


def upsert_rows(
    table: str, columns: Mapping[str, str], key: Sequence[str], records: Sequence[Mapping[str, Any]]
) -> list[tuple[str | None, ...]]:
    """The parameter rows of `records`: one per key, the last record of each key winning,
    ordered by key (so concurrent deliveries lock rows in one order). Checks every record
    first: a field not in `columns` or a missing key is InvalidArgument."""
    key_positions = [list(columns).index(name) for name in key]
    latest: dict[tuple[str, ...], tuple[str | None, ...]] = {}
    for position, record in enumerate(records):
        where = f"table {table}: record {position}"
        for field in record:  # PG-4: checked before the transaction
            if field not in columns:
                raise InvalidArgument(f"{where}: field {field!r} is not a column of the table")
        row = tuple(
            as_text(record.get(name), column_type, f"{where}, column {name}")
            for name, column_type in columns.items()
        )
        key_values = tuple(value for index in key_positions if (value := row[index]) is not None)
        if len(key_values) != len(key):
            missing = next(name for name in key if record.get(name) is None)
            raise InvalidArgument(f"{where}: key column {missing} is missing or null")
        latest[key_values] = row
    return [latest[key_values] for key_values in sorted(latest)]


def check_delivery_ids(job: object, checkpoint_id: object, node_id: object) -> None:
    """InvalidArgument unless job is a non-empty str and the ids are u64 (node id nonzero)."""
    if not isinstance(job, str) or not 0 < len(job) <= JOB_CHARS_MAX:
        raise InvalidArgument(f"delivery: job must be 1 to {JOB_CHARS_MAX} characters")
    for name, value, low in (("checkpoint_id", checkpoint_id, 0), ("node_id", node_id, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= U64_MAX:
            raise InvalidArgument(
                f"delivery of job {job}: {name} {value!r} is not in [{low}, 2^64)"
            )


def mapped_error(error: psycopg.Error, what: str) -> LaminarError:
    """The laminar kind of a psycopg error, its message one line naming `what`.

    Statement timeout: DeadlineExceeded. Connection lost or refused, server shutting down,
    serialization or deadlock (`OperationalError`, `InterfaceError`): StoreUnavailable, the
    transaction rolled back. A value, constraint or statement the server refused:
    InvalidArgument (retrying the same delivery fails the same way)."""
    lines = str(error).strip().splitlines()
    detail = f"{error.sqlstate or type(error).__name__}: {lines[0] if lines else '(no message)'}"
    if isinstance(error, psycopg.errors.QueryCanceled):
        return DeadlineExceeded(f"{what}: statement cancelled at its timeout ({detail})")
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(f"{what}: server unavailable ({detail})")
    return InvalidArgument(f"{what}: refused by the server ({detail})")
