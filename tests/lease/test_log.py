"""The authority log: records, head pointer, discovery, append (LA §4.1, LA §1.4; LA-T17 to LA-T29
and the read paths of LA-T35 to LA-T37, LA-T40, LA-T41; invariants LA-1 to LA-3, LA-11, LA-21,
LA-12).

LA-T17 to LA-T22 run on memory, file and the S3 test server; the rest on memory and file. Lost
responses and paused requests go through PausingStore, ScriptedStore or FaultyStore.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import CorruptRecord, InvalidArgument, StoreUnavailable
from laminar_cluster.lease import log
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_AUTHORITY_RECORD_BYTES
from laminar_cluster.lease.outcomes import (
    AppendContended,
    AppendCreated,
    AppendExistingIdentical,
    VersionedPointer,
)
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX, record_path
from laminar_cluster.lease.validate import decode_pointer, encode_pointer, encode_record
from laminar_cluster.store import CREATE, ObjectStore
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from laminar_cluster.store.file_backend import FileStore
from tests.lease.pausing_store import (
    A,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    counters,
    far_deadline,
    fault_record,
    pointer_seq,
    put_record,
    record_at,
    renew,
    set_pointer,
)
from tests.support.scripted_store import ScriptedStore

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


def test_la_t17_healthy_reads_never_list(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        acquired(await begin(leader))
        await put_record(store.inner, record_at(2, renewal=2))  # a writer crashed before publishing
        assert counters(await leader.load()) == (2, 2, 1)  # repaired
        store.reset_log()
        assert counters(await leader.load()) == (2, 2, 1)
        # The pointer (a conditional read) and the successor probe; record 2 was read and
        # verified by the first load, and records are immutable, so it is not read again.
        assert sorted(store.log) == [
            ("get", HEAD_PATH),
            ("get", record_path(3)),
        ]

    asyncio.run(main())


def test_la_t18_missing_pointer_discovery(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        for seq in (1, 6, 7):
            await put_record(store.inner, record_at(seq))
        gate = store.pause_put(HEAD_PATH, fail_after_apply=True)  # ambiguous, delayed create
        leader = authority(store, 1)
        async with asyncio.TaskGroup() as group:
            loading = group.create_task(leader.load())
            await gate.wait_reached()
            await put_record(store.inner, record_at(8))
            gate.release.set()
        loaded = loading.result()
        assert loaded is not None and loaded.seq == 8
        assert store.count("list") == 1
        assert store.count("put", HEAD_PATH) == 2  # Create at 7, then Update to 8
        assert await pointer_seq(store) == 8

    asyncio.run(main())


def test_la_t19_record_before_pointer_crash_repaired(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        acquired(await begin(leader))
        await put_record(store.inner, record_at(2))
        store.reset_log()
        loaded = await leader.load()
        assert loaded is not None and loaded.seq == 2
        assert store.count("put") == 1 and store.count("put", HEAD_PATH) == 1  # one Update
        assert store.count("list") == 0
        assert await pointer_seq(store) == 2

    asyncio.run(main())


def test_la_t20_stalled_reader_target_pruned(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        acquired(await begin(authority(store.inner, 1)))
        gate = store.pause_get(record_path(1))
        reader = authority(store, 2)
        async with asyncio.TaskGroup() as group:
            loading = group.create_task(reader.load())
            await gate.wait_reached()
            await put_record(store.inner, record_at(2))
            await put_record(store.inner, record_at(3))
            await set_pointer(store.inner, 3)
            await store.inner.delete(record_path(1))
            gate.release.set()
        loaded = loading.result()
        assert loaded is not None and loaded.seq == 3

    asyncio.run(main())


@pytest.mark.parametrize("kind", [FaultKind.AFTER, FaultKind.AFTER_AS_CONFLICT])
def test_la_t21_ambiguous_pointer_update_reconciled(
    make_store: Callable[[], ObjectStore], kind: FaultKind
) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        store = FaultyStore(make_store(), clock=clock, seed=1)
        leader = LeaderLeaseStore(store, clock=clock, ttl_s=5.0)
        acquired(await begin(leader))
        store.fail_next(kind, op="put", key_prefix=HEAD_PATH)  # applied, then reported failed
        assert counters(acquired(await renew(leader, 1))) == (2, 2, 1)
        assert store.stats.injected[kind] == 1
        assert await pointer_seq(store) == 2

    asyncio.run(main())


def test_la_t22_contenders_cannot_regress_pointer(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        clock = leader.clock
        acquired(await begin(leader))
        head1 = await leader.load_published_head()
        assert head1 is not None
        renewal = record_at(2, renewal=2)
        fault = fault_record(head1.record, reporter_node=9)
        assert await log.append(store, clock, head1, renewal) == AppendCreated()
        assert await log.append(store, clock, head1, fault) == AppendContended(winner=renewal)
        acquired(await renew(leader, 1))  # seq 3
        before = await store.get(HEAD_PATH)
        # LA-2: a stale publication cannot move the pointer back.
        assert await log.publish_pointer(store, clock, 2, head1.pointer) == 3
        after = await store.get(HEAD_PATH)
        assert after.body == before.body and after.meta.e_tag == before.meta.e_tag

    asyncio.run(main())


@LOCAL
def test_la_t23_stalled_writer_resurrects_pruned_seq(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        clock = leader.clock
        acquired(await begin(leader))
        stale_head = await leader.load_published_head()
        assert stale_head is not None
        stale = fault_record(stale_head.record, reporter_node=9)
        acquired(await renew(leader, 1))
        acquired(await renew(leader, 1))
        await store.delete(record_path(2))
        pointer_before = await store.get(HEAD_PATH)
        prunes: list[int] = []
        hook = lambda: prunes.append(1)  # noqa: E731
        outcome = await log.append(store, clock, stale_head, stale, on_appended=hook)
        head3 = await leader.load_record()
        assert head3 is not None and head3.lease.seq == 3
        assert outcome == AppendContended(winner=head3)
        assert prunes == [1]  # our record was created: a prune is scheduled
        assert (await store.get(record_path(2))).body == encode_record(stale)  # resurrected
        retry = await log.append(store, clock, stale_head, stale, on_appended=hook)
        assert retry == AppendContended(winner=head3)
        assert prunes == [1]
        assert (await store.get(HEAD_PATH)).body == pointer_before.body

    asyncio.run(main())


@LOCAL
def test_la_t24_malformed_pointer(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        await put_record(store.inner, record_at(1))
        await store.inner.put(HEAD_PATH, b'{"version":1,"sequence":1}', CREATE)
        with pytest.raises(CorruptRecord) as error:
            await authority(store, 1).load()
        assert error.value.key == HEAD_PATH
        assert store.count("list") == 0 and store.count("put") == 0

    asyncio.run(main())


@LOCAL
def test_la_t25_pointer_ahead(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        await put_record(store.inner, record_at(1))
        await set_pointer(store.inner, 2)
        with pytest.raises(CorruptRecord, match="points ahead to missing sequence 2"):
            await authority(store, 1).load()
        assert store.count("list") == 0 and store.count("put") == 0

    asyncio.run(main())


@LOCAL
def test_la_t26_pointer_lags_two(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        for seq in (1, 2, 3):
            await put_record(store.inner, record_at(seq))
        await set_pointer(store.inner, 1)
        with pytest.raises(CorruptRecord, match="lags by more than one"):
            await authority(store, 1).load()
        assert store.count("put") == 0 and await pointer_seq(store) == 1

    asyncio.run(main())


@LOCAL
def test_la_t27_versionless_pointer_update(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        clock = SimulatedClock(seed=1)
        stripped = VersionedPointer(pointer=log.new_pointer(clock, 1), e_tag=None, version=None)
        with pytest.raises(CorruptRecord, match="native conditional update version"):
            await log.publish_pointer(store, clock, 2, stripped)
        versioned = VersionedPointer(pointer=log.new_pointer(clock, 1), e_tag="x", version=None)
        with pytest.raises(InvalidArgument, match="not the exact successor"):
            await log.publish_pointer(store, clock, 3, versioned)
        assert store.log == []  # both refused before any request

    asyncio.run(main())


def test_la_t28_nonce_uniqueness() -> None:
    clock = SimulatedClock(seed=1)
    first, second = log.new_pointer(clock, 7), log.new_pointer(clock, 7)
    assert first.sequence == second.sequence == 7
    assert first.nonce != second.nonce
    assert encode_pointer(first) != encode_pointer(second)
    assert decode_pointer(encode_pointer(first)) == first


def test_la_t29_local_fs_without_update(tmp_path: Path) -> None:
    async def main() -> None:
        inner = FileStore(str(tmp_path / "no-update"), fsync=False)
        store = ScriptedStore(inner)
        store.reject_updates = True  # Create works, Update does not
        leader, rival = authority(store, 1), authority(store, 2)
        assert counters(acquired(await begin(leader))) == (1, 1, 1)
        with pytest.raises(StoreUnavailable, match="Update"):
            await leader.renew_exact(A, 1, deadline=far_deadline(leader.clock))
        assert await pointer_seq(inner) == 1
        assert await log.read_record(inner, 2) is not None
        for _ in range(2):  # later reads and writes keep failing closed
            with pytest.raises(StoreUnavailable, match="remained at sequence 1"):
                await leader.load()
            with pytest.raises(StoreUnavailable):
                await rival.begin_new_term(B, deadline=far_deadline(rival.clock))
        listed = [meta.key for meta in await inner.list(RECORDS_PREFIX)]
        assert listed == [record_path(1), record_path(2)]  # never forks

    asyncio.run(main())


@LOCAL
def test_la_t35_oversized_record(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = ScriptedStore(make_store())
        await store.inner.put(record_path(1), b" " * (MAX_AUTHORITY_RECORD_BYTES + 1), CREATE)
        await set_pointer(store.inner, 1)
        with pytest.raises(CorruptRecord, match="262145 bytes") as error:
            await authority(store, 1).load()
        assert error.value.key == record_path(1)
        # The body is never fetched beyond the bound.
        assert set(store.get_ends) <= {MAX_AUTHORITY_RECORD_BYTES + 1, 129}

    asyncio.run(main())


@LOCAL
def test_la_t36_empty_record(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        await store.put(record_path(1), b"", CREATE)
        await set_pointer(store, 1)
        with pytest.raises(CorruptRecord, match="0 bytes"):
            await authority(store, 1).load()

    asyncio.run(main())


def _reordered(body: bytes) -> bytes:
    value = json.loads(body)
    return json.dumps(dict(reversed(value.items())), separators=(",", ":")).encode()


@LOCAL
@pytest.mark.parametrize(
    "rewrite",
    [
        lambda body: json.dumps(json.loads(body), indent=2).encode(),
        _reordered,
        lambda body: json.dumps(
            {"seq": 1, "token": 1, "owner": 1, "expires_at_ms": 5}, indent=2
        ).encode(),
    ],
    ids=["pretty", "reordered", "early_version"],
)
def test_la_t37_noncanonical_record(
    make_store: Callable[[], ObjectStore], rewrite: Callable[[bytes], bytes]
) -> None:
    async def main() -> None:
        store = make_store()
        await store.put(record_path(1), rewrite(encode_record(record_at(1))), CREATE)
        await set_pointer(store, 1)
        with pytest.raises(CorruptRecord) as error:
            await authority(store, 1).load()
        assert error.value.key == record_path(1)

    asyncio.run(main())


@LOCAL
@pytest.mark.parametrize(
    "stray", [RECORDS_PREFIX + "garbage.txt", RECORDS_PREFIX + "v1.json"], ids=["40", "41"]
)
def test_la_t40_t41_stray_or_noncanonical_path(
    make_store: Callable[[], ObjectStore], stray: str
) -> None:
    async def main() -> None:
        store = make_store()
        await put_record(store, record_at(2))
        await store.put(stray, encode_record(record_at(1)), CREATE)
        with pytest.raises(CorruptRecord, match="not a canonical leader authority record path"):
            await authority(store, 1).load()
        assert await pointer_seq(store) is None  # discovery failed closed: nothing published

    asyncio.run(main())


@LOCAL
def test_append_reconciles_ambiguous_create(make_store: Callable[[], ObjectStore]) -> None:
    """LA §4.1.6 step 4 and LA §11.2: a create applied but reported failed is ExistingIdentical."""

    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        acquired(await begin(leader))
        head = await leader.load_published_head()
        assert head is not None
        candidate = record_at(2, renewal=2)
        store.pause_put(record_path(2), fail_after_apply=True).release.set()
        assert await leader.append(head, candidate) == AppendExistingIdentical()
        assert await leader.load_record() == candidate
        assert await leader.append(head, candidate) == AppendExistingIdentical()  # retried
        assert await leader.append(head, record_at(2, renewal=1)) == AppendContended(
            winner=candidate
        )

    asyncio.run(main())


@LOCAL
def test_append_lost_create_is_unavailable(make_store: Callable[[], ObjectStore]) -> None:
    """LA §4.1.6 step 4: a failed create with nothing durable is Io, and nothing is published."""

    async def main() -> None:
        store = ScriptedStore(make_store())
        leader = authority(store, 1)
        store.defer_next_put(record_path(1))  # lost before visibility
        with pytest.raises(StoreUnavailable, match="no record was durable"):
            await leader.append(None, record_at(1))
        assert await pointer_seq(store) is None
        with pytest.raises(InvalidArgument, match="empty published namespace"):
            await leader.append(None, record_at(2))
        head = None
        assert await leader.append(head, record_at(1)) == AppendCreated()
        published = await leader.load_published_head()
        with pytest.raises(InvalidArgument, match="after published sequence 1"):
            await leader.append(published, record_at(3))

    asyncio.run(main())
