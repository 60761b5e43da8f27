"""The one-time catalog seal (LA §3.9, LA §4.7, LA §8.8; LA-T82 to LA-T85; LA-17).

LA-T82 runs on memory, file and the S3 test server; the others on memory and file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.authority.catalog import (
    SealCreated,
    SealExistingIdentical,
    encode_and_reference,
    load_catalog_manifest,
    load_sealed_catalog_manifest,
    seal_catalog,
)
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.paths import catalog_manifest_path, record_path
from laminar_cluster.lease.records import CatalogManifest, LeaderLease
from laminar_cluster.store import CREATE, ObjectStore
from tests.authority.recovery_support import deadline, manifest_of, settle
from tests.lease.pausing_store import (
    TTL_S,
    A,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    counters,
    record_seqs,
    renew,
    sim,
    takeover,
)
from tests.support.scripted_store import ScriptedStore

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
MANIFEST = manifest_of("orders", "customers")


async def seal(
    leader: LeaderLeaseStore, proof: LeaderProof, manifest: CatalogManifest = MANIFEST
) -> object:
    return await seal_catalog(leader, proof, manifest, deadline=deadline(leader))


async def rival_takes_over(
    store: ObjectStore, seed: int = 2
) -> tuple[LeaderLeaseStore, LeaderLease]:
    rival = authority(store, seed)
    current = await rival.load()
    assert current is not None
    observation = rival.observe_rival(B, current)
    sim(rival).advance(TTL_S + 0.001)
    return rival, acquired(await takeover(rival, observation))


def test_la_t82_seal_idempotent_and_conflict(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        first = authority(store, 1)
        lease = acquired(await begin(first))
        second = authority(store, 2)  # another task of the same process, same proof
        gate = store.pause_put(record_path(2), count=2)
        async with asyncio.TaskGroup() as group:
            one = group.create_task(settle(seal(first, lease.proof())))
            two = group.create_task(settle(seal(second, lease.proof())))
            await gate.wait_reached()
            gate.release.set()
        outcomes = sorted(type(task.result()).__name__ for task in (one, two))
        assert outcomes == ["SealCreated", "SealExistingIdentical"]
        assert await record_seqs(store) == [1, 2]
        head = await first.load_record()
        assert head is not None and counters(head.lease) == (2, 1, 1)
        assert head.lease.catalog_manifest == encode_and_reference(MANIFEST)[1]
        assert await load_sealed_catalog_manifest(first) == MANIFEST
        assert isinstance(await seal(first, lease.proof()), SealExistingIdentical)
        with pytest.raises(Refused, match="already sealed"):  # LA-17: sealed once
            await seal(first, lease.proof(), manifest_of("orders"))
        assert await record_seqs(store) == [1, 2]

    asyncio.run(main())


@LOCAL
def test_la_t83_seal_fenced_by_takeover(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        gate = store.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            paused = group.create_task(settle(seal(leader, lease.proof())))
            await gate.wait_reached()
            rival, taken = await rival_takes_over(store)
            gate.release.set()
        assert isinstance(paused.result(), Fenced)  # LA-5
        assert counters(taken) == (2, 2, 2)
        head = await rival.load_record()
        assert head is not None and head.lease.catalog_manifest is None
        assert await load_sealed_catalog_manifest(rival) is None

    asyncio.run(main())


@LOCAL
def test_la_t83_seal_retries_after_renewal(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        gate = store.pause_put(record_path(2))
        async with asyncio.TaskGroup() as group:
            paused = group.create_task(settle(seal(leader, lease.proof())))
            await gate.wait_reached()
            renewed = acquired(await renew(authority(store, 3), 1))  # wins seq 2
            gate.release.set()
        assert isinstance(paused.result(), SealCreated)  # retried at seq 3
        head = await leader.load_record()
        assert head is not None
        assert counters(head.lease) == (3, 2, 1)  # the renewal is preserved
        assert head.lease.expires_at_ms == renewed.expires_at_ms
        assert head.lease.catalog_manifest == encode_and_reference(MANIFEST)[1]

    asyncio.run(main())


@LOCAL
def test_la_t83_takeover_preserves_seal(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        assert isinstance(await seal(leader, lease.proof()), SealCreated)
        rival, taken = await rival_takes_over(store)
        ref = encode_and_reference(MANIFEST)[1]
        assert taken.catalog_manifest == ref  # carried by the takeover
        assert await load_sealed_catalog_manifest(rival) == MANIFEST
        # The sealed check precedes the proof check: the deposed term learns it is durable.
        assert isinstance(await seal(leader, lease.proof()), SealExistingIdentical)
        assert isinstance(await seal(rival, taken.proof()), SealExistingIdentical)
        with pytest.raises(Refused):
            await seal(rival, taken.proof(), manifest_of("other"))
        assert await record_seqs(store) == [1, 2, 3]

    asyncio.run(main())


@LOCAL
def test_la_t84_preexisting_corrupt_blob(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        data, ref = encode_and_reference(MANIFEST)
        key = catalog_manifest_path(ref.sha256)
        await store.put(key, data.replace(b"orders", b"ORDERS"), CREATE)  # same size, foreign
        with pytest.raises(CorruptRecord, match="does not match its sealed reference"):
            await seal(leader, lease.proof())
        await store.delete(key)
        await store.put(key, b"{}", CREATE)
        with pytest.raises(CorruptRecord, match=f"is 2 bytes, expected {len(data)}"):
            await seal(leader, lease.proof())
        assert await record_seqs(store) == [1]  # no seal
        head = await leader.load_record()
        assert head is not None and head.lease.catalog_manifest is None
        await store.delete(key)
        with pytest.raises(CorruptRecord, match="is missing"):
            await load_catalog_manifest(leader, ref)
        assert isinstance(await seal(leader, lease.proof()), SealCreated)  # the blob is restored

    asyncio.run(main())


@LOCAL
def test_la_t85_renewals_copy_only_ref(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        big = manifest_of(*(f"table_{n:03d}" for n in range(50)), ddl_bytes=2_000)
        data, ref = encode_and_reference(big)
        assert len(data) > 100_000
        assert isinstance(await seal(leader, lease.proof(), big), SealCreated)
        renewed = acquired(await renew(leader, 1))
        assert counters(renewed) == (3, 2, 1) and renewed.catalog_manifest == ref
        # The spec's bound is on the lease JSON; the whole v9 record (every field present, nulls
        # written) stays under 1 KiB next to a 100 KB manifest.
        assert len(msgspec.json.encode(renewed)) < 512
        assert len((await store.get(record_path(3))).body) < 1_024
        assert await load_catalog_manifest(leader, ref) == big

    asyncio.run(main())


@LOCAL
def test_seal_rejects_bad_input_and_stale_terms(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        stale_proof = LeaderProof(owner=A.proof_owner(), fencing_token=1)
        with pytest.raises(Fenced):  # no authority head
            await seal(leader, stale_proof)
        lease = acquired(await begin(leader))
        acquired(await begin(leader))  # rotates the token to 2
        with pytest.raises(Fenced):
            await seal(leader, lease.proof())  # token 1 is a stale term
        with pytest.raises(Fenced, match="not canonical"):
            await seal(leader, LeaderProof(owner=A.proof_owner(), fencing_token=0))
        with pytest.raises(InvalidArgument, match="is not unique"):
            await seal(leader, stale_proof, manifest_of("orders", "orders"))
        assert await record_seqs(store) == [1, 2]

    asyncio.run(main())


@LOCAL
def test_ambiguous_seal_reports_existing_identical(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = ScriptedStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        data, ref = encode_and_reference(MANIFEST)
        store.defer_next_put(catalog_manifest_path(ref.sha256))  # the blob write is lost
        with pytest.raises(StoreUnavailable, match=r"reconciliation failed .*is missing"):
            await seal(leader, lease.proof())
        store.fail_next_put_after_apply(catalog_manifest_path(ref.sha256))  # lands, reply lost
        store.fail_next_put_after_apply(record_path(2))
        # LA §11.2: an ambiguous append whose write applied is ExistingIdentical, never Created.
        assert isinstance(await seal(leader, lease.proof()), SealExistingIdentical)
        assert await load_sealed_catalog_manifest(leader) == MANIFEST
        assert (await store.get(catalog_manifest_path(ref.sha256))).body == data
        with pytest.raises(DeadlineExceeded):
            await seal_catalog(leader, lease.proof(), MANIFEST, deadline=leader.clock.monotonic())

    asyncio.run(main())
