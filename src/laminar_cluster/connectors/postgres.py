"""The PostgreSQL sink: each delivery applied exactly once, in one transaction with a marker.

One delivery (one participant's records of one committed checkpoint) is one transaction:

1. insert the marker row (job, table, node id, checkpoint id) into `laminar_sink_markers`
   with `ON CONFLICT DO NOTHING RETURNING`. No row back: this delivery was applied before (or
   a concurrent duplicate committed it while we waited on its key): roll back, return False;
2. upsert the records by key (`INSERT ... ON CONFLICT (key) DO UPDATE`, every non-key
   column), the last record of a key winning;
3. commit: the marker and the rows become visible together, or neither does.

A crash or lost connection at any await before the commit leaves nothing (the server rolls
the transaction back); the same delivery, retried, applies. A commit whose answer was lost
may have applied: the retry then finds the marker and returns False. `delivered_through` is
the highest checkpoint id among the job's markers for the table. Errors: connection failures
are StoreUnavailable (retry within the deadline: `clock.retry_until`), values or names the
server refuses are InvalidArgument, a passed deadline is DeadlineExceeded.
Protocol: docs/protocols/postgres-sink.md (PG-1 .. PG-6).
"""

from __future__ import annotations

import asyncio
import math
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg import sql

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.connectors import postgres_sql as q
from laminar_cluster.connectors.delivery import Delivery, Sink
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore

T = TypeVar("T")
APPLICATION_NAME = "laminar-cluster sink"
CONNECT_TIMEOUT_S_MIN = 2  # libpq's own floor for connect_timeout


@dataclass(frozen=True, kw_only=True)
class PostgresSink(Sink):
    """A PostgreSQL table that receives a job's `stream`, upserted by `key`, exactly once.

    `columns` maps each column name to its SQL type (one of `postgres_sql.COLUMN_TYPES`);
    a record's missing fields are NULL, a field that is not a column is InvalidArgument.
    `create_table`: create the marker table and this table (primary key `key`) if missing.
    The table name is unqualified: the DSN's search_path chooses its schema.
    """

    dsn: str
    table: str
    columns: Mapping[str, str]
    key: tuple[str, ...]
    create_table: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        q.check_identifier(self.table, "table")
        if not isinstance(self.columns, Mapping) or not self.columns:
            raise InvalidArgument(f"table {self.table}: columns must be a non-empty mapping")
        columns = {
            q.check_identifier(name, f"table {self.table}: column"): q.normalized_type(
                f"{self.table}.{name}", column_type
            )
            for name, column_type in self.columns.items()
        }
        object.__setattr__(self, "columns", types.MappingProxyType(columns))
        key = tuple(self.key) if isinstance(self.key, list | tuple) else ()
        if not key or len(set(key)) != len(key) or any(name not in columns for name in key):
            raise InvalidArgument(
                f"table {self.table}: key {self.key!r} must be distinct names of its columns"
            )
        object.__setattr__(self, "key", key)
        self._dsn_fields()  # a DSN that does not parse fails here, not at the first delivery

    def _dsn_fields(self) -> dict[str, str]:
        try:
            fields = psycopg.conninfo.conninfo_to_dict(self.dsn)
        except psycopg.Error:
            raise InvalidArgument(f"table {self.table}: the dsn does not parse") from None
        return {name: str(value) for name, value in fields.items() if value is not None}

    def describe(self) -> str:
        """One line for logs (never the password)."""
        fields = self._dsn_fields()
        where = (
            f"{fields.get('host', 'localhost')}:{fields.get('port', '5432')}"
            f"/{fields.get('dbname', fields.get('user', ''))}"
        )
        return (
            f"postgres table {self.table} on {where}, key ({', '.join(self.key)}),"
            f" stream {self.stream}"
        )

    def open(self, store: ObjectStore, clock: Clock) -> PostgresWriter:
        """A writer with its own connection (opened at first use). The store is unused."""
        del store
        return PostgresWriter(self, clock)


class PostgresWriter:
    """The SinkWriter of one PostgresSink: one connection, opened lazily and reopened after a
    failure; calls on one writer run one at a time."""

    def __init__(self, sink: PostgresSink, clock: Clock) -> None:
        self._sink = sink
        self._clock = clock
        self._connection: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._tables_ready = not sink.create_table
        self._lock = asyncio.Lock()
        self._closed = False
        self._upsert = q.upsert_statement(sink.table, sink.columns, sink.key)

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        """Apply the delivery exactly once (module docstring): True if applied now, False if
        it had been applied before. Records are checked before the transaction starts."""
        sink = self._sink
        q.check_delivery_ids(delivery.job, delivery.checkpoint_id, delivery.node_id)
        rows = q.upsert_rows(sink.table, sink.columns, sink.key, delivery.records)
        marker = (
            delivery.job,
            sink.table,
            delivery.node_id,
            delivery.checkpoint_id,
            len(delivery.records),
        )
        what = (
            f"table {sink.table}: delivery of job {delivery.job} checkpoint"
            f" {delivery.checkpoint_id} node {delivery.node_id}"
        )

        async def apply(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
            async with connection.transaction() as transaction:
                await self._set_statement_timeout(connection, deadline)
                cursor = await connection.execute(q.MARKER_INSERT, marker)
                if await cursor.fetchone() is None:  # PG-1: applied before, a replay
                    raise psycopg.Rollback(transaction)
                if rows:
                    await cursor.executemany(self._upsert, rows)
                return True  # PG-2: the marker and the rows commit together
            return False

        return await self._run(apply, what=what, deadline=deadline)

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        """The highest checkpoint id among `job`'s markers for this table, None if none."""
        q.check_delivery_ids(job, 0, 1)

        async def read(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> int | None:
            async with connection.transaction():
                await self._set_statement_timeout(connection, deadline)
                cursor = await connection.execute(q.MARKER_MAX, (job, self._sink.table))
                found = await cursor.fetchone()
            value = found[0] if found else None
            return None if value is None else int(str(value))

        what = f"table {self._sink.table}: delivered_through of job {job}"
        return await self._run(read, what=what, deadline=deadline)

    async def close(self) -> None:
        """Close the connection; the writer is unusable after."""
        async with self._lock:
            self._closed = True
            await self._drop()

    async def _run(
        self,
        operation: Callable[[psycopg.AsyncConnection[tuple[object, ...]]], Awaitable[T]],
        *,
        what: str,
        deadline: float,
    ) -> T:
        """Run `operation` on the connection (opened if needed) within `deadline`, errors
        mapped to laminar kinds; a connection in an unknown state is dropped."""
        async with self._lock:
            if self._closed:
                raise InvalidArgument(f"{what}: the writer is closed")
            try:
                async with within_deadline(self._clock, deadline, what):
                    connection = await self._connect(deadline)
                    return await operation(connection)
            except psycopg.Error as error:
                mapped = q.mapped_error(error, what)
                if not isinstance(mapped, InvalidArgument):
                    await self._drop()
                raise mapped from error
            except BaseException:  # deadline or cancellation mid-statement: state unknown
                await self._drop()
                raise

    async def _connect(self, deadline: float) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        remaining_s = deadline - self._clock.monotonic()
        self._connection = await psycopg.AsyncConnection.connect(
            self._sink.dsn,
            autocommit=True,  # transactions are explicit: connection.transaction()
            connect_timeout=max(CONNECT_TIMEOUT_S_MIN, math.ceil(remaining_s)),
            application_name=APPLICATION_NAME,
        )
        if not self._tables_ready:
            await self._create_tables(self._connection, deadline)
            self._tables_ready = True
        return self._connection

    async def _create_tables(
        self, connection: psycopg.AsyncConnection[tuple[object, ...]], deadline: float
    ) -> None:
        """CREATE TABLE IF NOT EXISTS both tables, serialized across processes by an advisory
        lock (concurrent creators of one table otherwise fail on the catalog's unique index)."""
        sink = self._sink
        async with connection.transaction():
            await self._set_statement_timeout(connection, deadline)
            # PG-6: one creator at a time, across processes
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (q.DDL_LOCK_KEY,))
            await connection.execute(q.MARKER_DDL)
            await connection.execute(q.table_ddl(sink.table, sink.columns, sink.key))

    async def _set_statement_timeout(
        self, connection: psycopg.AsyncConnection[tuple[object, ...]], deadline: float
    ) -> None:
        """The server cancels each statement of this transaction that would outlive `deadline`."""
        timeout_ms = max(1, math.floor((deadline - self._clock.monotonic()) * 1000))
        await connection.execute(
            sql.SQL("SELECT set_config('statement_timeout', %s, true)"), (f"{timeout_ms}ms",)
        )

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
