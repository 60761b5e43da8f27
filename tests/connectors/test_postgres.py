"""The PostgreSQL sink against a real server (tests.support.postgres): upserts by key, one
transaction with its marker per delivery, replays and concurrent duplicates applied once,
crashes before the commit leaving nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.postgres import APPLICATION_NAME, PostgresSink, PostgresWriter
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, StoreUnavailable
from laminar_cluster.store import open_store

pytestmark = pytest.mark.postgres

CLOCK = RealClock()
COLUMNS = {"user": "text", "window_start_ms": "bigint", "count": "bigint"}
KEY = ("user", "window_start_ms")
GATE_LOCK = 4242


@pytest.fixture
def table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def sink(dsn: str, table: str, **options: Any) -> PostgresSink:
    return PostgresSink(dsn=dsn, table=table, columns=COLUMNS, key=KEY, **options)


def writer(dsn: str, table: str) -> PostgresWriter:
    return sink(dsn, table).open(open_store("memory://"), CLOCK)


def soon(seconds: float = 10.0) -> float:
    return CLOCK.monotonic() + seconds


def delivery(checkpoint_id: int, records: list[dict[str, Any]], node_id: int = 1) -> Delivery:
    return Delivery(job="clicks", checkpoint_id=checkpoint_id, node_id=node_id, records=records)


def count(user: str, count: Any, window_start_ms: int = 0) -> dict[str, Any]:
    return {"user": user, "window_start_ms": window_start_ms, "count": count}


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


async def outcome(call: Awaitable[bool]) -> bool | Exception:
    """What `call` returned, or the exception it raised."""
    try:
        return await call
    except Exception as error:
        return error


def query(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        return connection.execute(statement).fetchall()


def table_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    return query(dsn, f'SELECT "user", window_start_ms, count FROM {table} ORDER BY 1, 2')


def markers(dsn: str, table: str) -> list[tuple[Any, ...]]:
    return query(
        dsn,
        "SELECT job, node_id, checkpoint_id, rows FROM laminar_sink_markers"
        f" WHERE sink_table = '{table}' ORDER BY checkpoint_id, node_id",
    )


@asynccontextmanager
async def gate(dsn: str, table: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A trigger that makes every row written to `table` wait for an advisory lock, held by
    the yielded admin connection until the block unlocks it (or ends)."""
    admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        await admin.execute(
            f"CREATE FUNCTION {table}_gate() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$ BEGIN PERFORM pg_advisory_xact_lock_shared({GATE_LOCK}); RETURN NEW; END $$"
        )
        await admin.execute(
            f"CREATE TRIGGER gate BEFORE INSERT ON {table}"
            f" FOR EACH ROW EXECUTE FUNCTION {table}_gate()"
        )
        await admin.execute(f"SELECT pg_advisory_lock({GATE_LOCK})")
        yield admin
    finally:
        await admin.execute("SELECT pg_advisory_unlock_all()")
        await admin.close()


async def waiting_sink_pids(admin: psycopg.AsyncConnection[Any], expected: int) -> list[int]:
    """The pids of the sink's backends waiting on a lock, once there are `expected` of them."""
    for _ in range(200):
        cursor = await admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock' ORDER BY pid",
            (APPLICATION_NAME,),
        )
        pids = [row[0] for row in await cursor.fetchall()]
        if len(pids) == expected:
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"{expected} sink backends never waited on a lock")


def test_pg3_upserts_by_key_across_deliveries_last_record_wins(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        first = [count("a", 1), count("b", 2), count("a", 3)]
        assert await sink_writer.deliver(delivery(1, first), deadline=soon())
        second = [count("a", 5), {"user": "c", "window_start_ms": 60_000}]
        assert await sink_writer.deliver(delivery(2, second), deadline=soon())
        await sink_writer.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 5), ("b", 0, 2), ("c", 60_000, None)]
    assert markers(postgres_dsn, table) == [("clicks", 1, 1, 3), ("clicks", 1, 2, 2)]


def test_pg1_replay_of_an_applied_delivery_is_a_noop(postgres_dsn: str, table: str) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        assert await sink_writer.deliver(delivery(1, [count("a", 1)]), deadline=soon())
        assert await sink_writer.deliver(delivery(2, [count("a", 2)]), deadline=soon())
        assert not await sink_writer.deliver(delivery(1, [count("a", 1)]), deadline=soon())
        await sink_writer.close()
        restarted = writer(postgres_dsn, table)
        assert not await restarted.deliver(delivery(2, [count("a", 9)]), deadline=soon())
        await restarted.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 2)]
    assert len(markers(postgres_dsn, table)) == 2


def test_pg1_concurrent_duplicate_deliveries_apply_once(postgres_dsn: str, table: str) -> None:
    """Both transactions are open at once: one waits in the row trigger after its marker,
    the other on that uncommitted marker; released, exactly one applies."""

    async def body() -> None:
        writers = [writer(postgres_dsn, table), writer(postgres_dsn, table)]
        for each in writers:
            assert await each.delivered_through("clicks", deadline=soon()) is None
        same = delivery(4, [count("a", 1), count("b", 2)], node_id=7)
        async with gate(postgres_dsn, table) as admin, asyncio.TaskGroup() as group:
            tasks = [group.create_task(each.deliver(same, deadline=soon())) for each in writers]
            await waiting_sink_pids(admin, expected=2)
            await admin.execute("SELECT pg_advisory_unlock_all()")
        assert sorted(task.result() for task in tasks) == [False, True]
        for each in writers:
            await each.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 1), ("b", 0, 2)]
    assert markers(postgres_dsn, table) == [("clicks", 7, 4, 2)]


def test_pg2_connection_killed_before_commit_leaves_nothing_and_retry_applies(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        assert await sink_writer.delivered_through("clicks", deadline=soon()) is None
        records = delivery(3, [count("a", 1), count("b", 2)])
        async with gate(postgres_dsn, table) as admin, asyncio.TaskGroup() as group:
            attempt = group.create_task(outcome(sink_writer.deliver(records, deadline=soon())))
            [pid] = await waiting_sink_pids(admin, expected=1)
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert isinstance(attempt.result(), StoreUnavailable)
        assert table_rows(postgres_dsn, table) == []
        assert markers(postgres_dsn, table) == []
        assert await sink_writer.deliver(records, deadline=soon())
        assert await sink_writer.delivered_through("clicks", deadline=soon()) == 3
        await sink_writer.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 1), ("b", 0, 2)]


def test_pg2_deadline_passing_in_the_transaction_leaves_nothing(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        assert await sink_writer.delivered_through("clicks", deadline=soon()) is None
        async with gate(postgres_dsn, table):
            with pytest.raises(DeadlineExceeded):
                await sink_writer.deliver(delivery(1, [count("a", 1)]), deadline=soon(0.3))
        with pytest.raises(DeadlineExceeded):
            await sink_writer.deliver(delivery(1, [count("a", 1)]), deadline=soon(-1))
        assert await sink_writer.deliver(delivery(1, [count("a", 1)]), deadline=soon())
        await sink_writer.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 1)]


def test_pg5_delivered_through_is_the_highest_applied_checkpoint_of_the_job(
    postgres_dsn: str, table: str
) -> None:
    u64_max = (1 << 64) - 1

    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        other_table = writer(postgres_dsn, f"{table}_other")
        assert await sink_writer.delivered_through("clicks", deadline=soon()) is None
        assert await sink_writer.deliver(delivery(3, [], node_id=2), deadline=soon())
        assert await sink_writer.deliver(delivery(7, [count("a", 1)]), deadline=soon())
        assert await sink_writer.delivered_through("clicks", deadline=soon()) == 7
        assert await sink_writer.delivered_through("other-job", deadline=soon()) is None
        assert await other_table.delivered_through("clicks", deadline=soon()) is None
        assert await other_table.deliver(delivery(u64_max, [], node_id=u64_max), deadline=soon())
        assert await other_table.delivered_through("clicks", deadline=soon()) == u64_max
        assert await sink_writer.delivered_through("clicks", deadline=soon()) == 7
        for each in (sink_writer, other_table):
            await each.close()

    run(body)
    assert markers(postgres_dsn, f"{table}_other") == [
        ("clicks", Decimal(u64_max), Decimal(u64_max), 0)
    ]


def test_pg4_unknown_field_is_refused_before_anything_is_written(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        bad = delivery(1, [count("a", 1), {"user": "b", "window_start_ms": 0, "clicks": 2}])
        with pytest.raises(InvalidArgument, match=rf"table {table}: record 1: field 'clicks'"):
            await sink_writer.deliver(bad, deadline=soon())
        with pytest.raises(InvalidArgument, match="key column window_start_ms"):
            await sink_writer.deliver(delivery(1, [{"user": "a"}]), deadline=soon())
        assert await sink_writer.delivered_through("clicks", deadline=soon()) is None
        await sink_writer.close()

    run(body)
    assert table_rows(postgres_dsn, table) == []


def test_pg2_value_that_does_not_fit_its_column_rolls_back_the_delivery(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        sink_writer = writer(postgres_dsn, table)
        misfits = [count("b", value) for value in ("many", 1.5, True, 1 << 63)]
        for misfit in [*misfits, count("nul\x00", 1)]:
            bad = delivery(1, [count("a", 1), misfit])
            with pytest.raises(InvalidArgument, match=rf"table {table}: .*refused by the server"):
                await sink_writer.deliver(bad, deadline=soon())
        assert await sink_writer.delivered_through("clicks", deadline=soon()) is None
        assert table_rows(postgres_dsn, table) == []
        assert await sink_writer.deliver(delivery(1, [count("a", "12")]), deadline=soon())
        await sink_writer.close()

    run(body)
    assert table_rows(postgres_dsn, table) == [("a", 0, 12)]


def test_every_allowed_column_type_round_trips(postgres_dsn: str, table: str) -> None:
    columns = {
        "id": "bigint",
        "n": "integer",
        "payload": "jsonb",
        "ok": "boolean",
        "score": "double precision",
        "at": "timestamptz",
        "amount": "numeric",
        "note": "text",
    }
    record = {
        "id": 1,
        "n": 2,
        "payload": {"a": [1, "x"]},
        "ok": False,
        "score": 0.25,
        "at": "2024-05-01T12:00:00Z",
        "amount": "12.50",
        "note": 3,
    }

    async def body() -> None:
        spec = PostgresSink(dsn=postgres_dsn, table=table, columns=columns, key=("id",))
        sink_writer = spec.open(open_store("memory://"), CLOCK)
        assert await sink_writer.deliver(delivery(1, [record]), deadline=soon())
        await sink_writer.close()

    run(body)
    [row] = query(
        postgres_dsn,
        f"SELECT id, n, payload, ok, score, extract(epoch FROM at), amount, note FROM {table}",
    )
    assert row == (1, 2, {"a": [1, "x"]}, False, 0.25, Decimal(1714564800), Decimal("12.50"), "3")


def test_pg6_tables_created_once_under_concurrent_openers(postgres_dsn: str, table: str) -> None:
    async def body() -> None:
        writers = [writer(postgres_dsn, table) for _ in range(4)]
        async with asyncio.TaskGroup() as group:
            reads = [
                group.create_task(each.delivered_through("clicks", deadline=soon()))
                for each in writers
            ]
        assert [read.result() for read in reads] == [None] * 4
        for checkpoint_id, each in enumerate(writers, start=1):
            assert await each.deliver(delivery(checkpoint_id, [count("a", 1)]), deadline=soon())
            await each.close()

    run(body)
    created = query(
        postgres_dsn,
        f"SELECT count(*) FROM pg_class WHERE relname IN ('{table}', 'laminar_sink_markers')"
        " AND relkind = 'r'",
    )
    assert created == [(2,)]
    assert len(markers(postgres_dsn, table)) == 4


def test_unreachable_server_is_store_unavailable_and_missing_table_invalid(
    postgres_dsn: str, table: str
) -> None:
    async def body() -> None:
        with psycopg.connect(postgres_dsn) as probe:
            port = probe.info.port
        closed = writer(f"postgresql://postgres@127.0.0.1:{port + 1}/postgres", table)
        with pytest.raises(StoreUnavailable, match=f"table {table}"):
            await closed.deliver(delivery(1, [count("a", 1)]), deadline=soon())
        absent = sink(postgres_dsn, table, create_table=False).open(open_store("memory://"), CLOCK)
        with pytest.raises(InvalidArgument, match="42P01"):
            await absent.deliver(delivery(1, [count("a", 1)]), deadline=soon())
        for each in (closed, absent):
            await each.close()

    run(body)


@pytest.mark.parametrize(
    ("options", "fact"),
    [
        ({"table": "Clicks"}, "table 'Clicks' is not an identifier"),
        ({"columns": {"user": "varchar"}}, "type 'varchar' is not one of"),
        ({"columns": {"user id": "text"}}, "column 'user id' is not an identifier"),
        ({"key": ("count", "count")}, "must be distinct names of its columns"),
        ({"key": ("day",)}, "must be distinct names of its columns"),
        ({"dsn": "not a dsn"}, "the dsn does not parse"),
    ],
)
def test_sink_declaration_is_checked(options: dict[str, Any], fact: str) -> None:
    fields: dict[str, Any] = {"dsn": "", "table": "clicks", "columns": COLUMNS, "key": KEY}
    with pytest.raises(InvalidArgument, match=fact):
        PostgresSink(**(fields | options))


def test_describe_names_table_and_server_never_the_password() -> None:
    spec = PostgresSink(
        dsn="postgresql://app:s3cret@db.internal:6543/analytics",
        table="clicks",
        columns={"user": "TEXT", "count": "Double  Precision"},
        key=("user",),
    )
    assert spec.describe() == (
        "postgres table clicks on db.internal:6543/analytics, key (user), stream main"
    )
    assert dict(spec.columns) == {"user": "text", "count": "double precision"}
