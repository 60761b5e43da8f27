"""Checkpoint ID allocation (CD §4.3, CD §3.6; CD-1 to CD-3; CD-T11 to CD-T25).

CD-T11 to CD-T15 are local mode on a real directory (`local_filesystem`); CD-T16 to CD-T25 shared
mode on memory, file and the S3 test server, except the lost-response cases, which script faults
with ScriptedStore over an in-memory or a file store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import AllocatorMode, DecisionStore
from laminar_cluster.checkpoint.limits import CHECKPOINT_ID_BLOCK_SIZE, U64_MAX
from laminar_cluster.checkpoint.paths import IDENTITY_PATH, block_path
from laminar_cluster.checkpoint.records import DeploymentIdentity
from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.clock.retry import retry_until
from laminar_cluster.codec import decode, encode
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.faulty import FaultConfig, FaultyStore
from laminar_cluster.store.file_backend import FileStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from tests.checkpoint.conftest import deadline
from tests.support.scripted_store import ScriptedStore

B = CHECKPOINT_ID_BLOCK_SIZE


@pytest.fixture(params=["memory", "file"])
def inner_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A fresh store to wrap in a ScriptedStore or a FaultyStore."""
    if request.param == "memory":
        yield ObstoreStore.memory()
    else:
        yield FileStore(str(tmp_path / "scripted"), fsync=False)


async def alloc(instance: DecisionStore, clock: Clock, minimum: int = 1) -> int:
    return await instance.allocate_checkpoint_id_at_least(minimum, deadline=deadline(clock))


def alloc_sync(instance: DecisionStore, clock: Clock, minimum: int = 1) -> int:
    return asyncio.run(alloc(instance, clock, minimum))


def keys(store: ObjectStore) -> list[str]:
    return [meta.key for meta in asyncio.run(store.list(""))]


def read_head(store: ObjectStore) -> DeploymentIdentity:
    got = asyncio.run(store.get(IDENTITY_PATH))
    return decode(got.body, DeploymentIdentity, key=IDENTITY_PATH, max_bytes=1024)


def overwrite_head(store: ObjectStore, head: DeploymentIdentity) -> None:
    asyncio.run(store.put(IDENTITY_PATH, encode(head), OVERWRITE))


def with_changes(head: DeploymentIdentity, **changes: object) -> DeploymentIdentity:
    fields = {name: getattr(head, name) for name in head.__struct_fields__}
    fields.update(changes)
    return DeploymentIdentity(**fields)  # type: ignore[arg-type]


# Local mode (CD-T11 to CD-T15).


def test_cd_t11_ids_start_at_one_local_fs(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    async def first_life() -> list[int]:
        instance = open_local()
        return [
            await alloc(instance, clock),
            await alloc(instance, clock),
            await alloc(instance, clock, 10),
            await alloc(instance, clock),
        ]

    assert asyncio.run(first_life()) == [1, 2, 10, 11]
    restarted = open_local()
    assert alloc_sync(restarted, clock) == B + 1  # the unused tail of block 0 is burned
    with pytest.raises(InvalidArgument, match="minimum checkpoint ID must be nonzero"):
        alloc_sync(restarted, clock, 0)


def test_cd_t11_minimum_zero_does_no_io(clock: Clock) -> None:
    scripted = ScriptedStore(ObstoreStore.memory())
    for instance in (
        DecisionStore.shared(scripted, clock=clock),
        DecisionStore.local_single_writer(scripted, clock=clock),
    ):
        with pytest.raises(InvalidArgument, match="minimum checkpoint ID must be nonzero"):
            alloc_sync(instance, clock, 0)
    assert sum(scripted.requests.values()) == 0


def test_cd_t12_local_one_object_per_block(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    instance = open_local()

    async def main() -> list[int]:
        return [await alloc(instance, clock) for _ in range(4096)]

    assert asyncio.run(main()) == list(range(1, 4097))
    assert keys(instance.store) == [IDENTITY_PATH, block_path(0)]
    assert block_path(0) == "checkpoint-id-blocks/block=00000000000000000000"
    assert read_head(instance.store).checkpoint_id == 0  # local mode never advances the head


def test_cd_t13_local_floor_jump_block(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    minimum = 3 * B + 17
    instance = open_local()

    async def main() -> list[int]:
        first = await alloc(instance, clock)
        jumped = await alloc(instance, clock, minimum)
        return [first, jumped, await alloc(instance, clock)]

    assert asyncio.run(main()) == [1, minimum, minimum + 1]
    # The jump claimed block 3 directly, without touching blocks 1 and 2.
    assert keys(instance.store) == [IDENTITY_PATH, block_path(0), block_path(3)]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("checkpoint-id-blocks/block=5", "malformed checkpoint ID block path"),
        ("checkpoint-id-blocks/block=+0000000000000000005", "malformed checkpoint ID block path"),
        ("checkpoint-id-blocks/block=0000000000000000000x", "malformed checkpoint ID block path"),
        ("checkpoint-id-blocks/tmp", "malformed checkpoint ID block path"),
        ("checkpoint-id-blocks/block=00000000000000000007/x", "malformed checkpoint ID block path"),
        ("checkpoint-id-blocks/block=99999999999999999999", "is not canonical"),
        ("checkpoint-id-blocks/block=00000281474976710656", "out of range"),
    ],
)
def test_cd_t14_local_malformed_block_listing(
    name: str, expected: str, open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    first = open_local()
    assert alloc_sync(first, clock) == 1
    asyncio.run(first.store.put(name, b"", CREATE))
    with pytest.raises(CorruptRecord, match=expected) as caught:
        alloc_sync(open_local(), clock)
    assert caught.value.key == name
    assert alloc_sync(first, clock) == 2  # the initialized instance keeps its block


def test_cd_t15_local_two_instances_disjoint(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    first, second = open_local(), open_local()

    async def main() -> tuple[list[int], list[int]]:
        a: list[int] = []
        b: list[int] = []
        for _ in range(50):
            a.append(await alloc(first, clock))
            b.append(await alloc(second, clock))
        return a, b

    a, b = asyncio.run(main())
    assert not set(a) & set(b)
    assert a == list(range(1, 51))
    assert b == list(range(B + 1, B + 51))  # the second instance claimed the next block
    assert keys(first.store) == [IDENTITY_PATH, block_path(0), block_path(1)]


def test_cd_t15_local_block_claims_skip_a_claimed_block(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    """An instance whose listing is stale moves past a block another instance claimed since."""
    first, second = open_local(), open_local()
    assert alloc_sync(first, clock) == 1
    assert alloc_sync(second, clock) == B + 1
    assert alloc_sync(first, clock, B) == B  # block 0 still has it
    # first's block is used up: its next claim finds block 1 taken and moves to block 2.
    assert alloc_sync(first, clock) == 2 * B + 1


def test_cd_t25_id_space_exhausted_local(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    instance = open_local()
    assert alloc_sync(instance, clock, U64_MAX) == U64_MAX  # the last block's end saturates
    with pytest.raises(Refused, match="exhausted"):
        alloc_sync(instance, clock)
    with pytest.raises(Refused, match="exhausted"):
        alloc_sync(open_local(), clock)


# Shared mode (CD-T16 to CD-T25).


def test_cd_t16_shared_counter_bounded(
    make_store: Callable[[], ObjectStore], clock: Clock, backend: str
) -> None:
    counting = CountingStore(make_store())
    instance = DecisionStore.shared(counting, clock=clock)
    allocations = 256  # ~300 requests: also quick on the S3 test server

    async def main() -> list[int]:
        return [await alloc(instance, clock) for _ in range(allocations)]

    assert asyncio.run(main()) == list(range(1, allocations + 1))
    assert keys(instance.store) == [IDENTITY_PATH]
    # Identity: one get (absent) and one create; then one CAS per allocation.
    assert counting.requests["put"] == allocations + 1
    assert counting.requests["get"] == 1
    assert read_head(instance.store).checkpoint_id == allocations


def test_cd_t16_fresh_instance_costs_two_requests(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    assert alloc_sync(DecisionStore.shared(make_store(), clock=clock), clock) == 1
    counting = CountingStore(make_store())
    assert alloc_sync(DecisionStore.shared(counting, clock=clock), clock) == 2
    assert dict(counting.requests) == {"get": 1, "put": 1}


def test_cd_t17_stale_cache_floor_jump(
    open_shared: Callable[[], DecisionStore], clock: Clock
) -> None:
    a, b = open_shared(), open_shared()
    assert alloc_sync(a, clock) == 1
    assert alloc_sync(b, clock, 100) == 100
    assert alloc_sync(a, clock) == 101  # a's cached head is stale: its CAS fails, it re-reads


def test_cd_t18_authority_deletion_new_deployment(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    old = open_shared()
    assert alloc_sync(old, clock) == 1
    old_id = asyncio.run(old.load_or_create_deployment_id())
    asyncio.run(shared_store.delete(IDENTITY_PATH))
    with pytest.raises(CorruptRecord, match="checkpoint ID head disappeared after durable ID 1"):
        alloc_sync(old, clock)
    with pytest.raises(ObjectNotFound):
        asyncio.run(shared_store.get(IDENTITY_PATH))  # never recreated by the old instance
    new = open_shared()
    new_id = asyncio.run(new.load_or_create_deployment_id())
    assert new_id != old_id
    assert alloc_sync(new, clock) == 1  # IDs restart only under the new deployment (CD-3)
    # The old instance now meets a head of another deployment and refuses it.
    with pytest.raises(CorruptRecord, match=f"belongs to deployment {new_id}"):
        alloc_sync(old, clock)


def test_cd_t19_missing_authority_not_recreated(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    instance = open_shared()
    deployment_id = asyncio.run(instance.load_or_create_deployment_id())
    instance.ctx.cached_head = None
    asyncio.run(shared_store.delete(IDENTITY_PATH))
    with pytest.raises(CorruptRecord) as caught:
        alloc_sync(instance, clock)
    assert f"checkpoint ID authority for deployment {deployment_id} disappeared" in str(
        caught.value
    )
    with pytest.raises(ObjectNotFound):
        asyncio.run(shared_store.get(IDENTITY_PATH))


def test_cd_t20_shared_lost_success_by_token(inner_store: ObjectStore, clock: Clock) -> None:
    scripted = ScriptedStore(inner_store)
    instance = DecisionStore.shared(scripted, clock=clock)
    asyncio.run(instance.load_or_create_deployment_id())
    scripted.fail_next_put_after_apply(IDENTITY_PATH)
    assert alloc_sync(instance, clock) == 1  # the re-read shows our exact proposal
    assert alloc_sync(instance, clock) == 2
    assert read_head(inner_store).checkpoint_id == 2


def test_cd_t21_uncertain_write_burned(inner_store: ObjectStore, clock: Clock) -> None:
    scripted = ScriptedStore(inner_store)
    instance = DecisionStore.shared(scripted, clock=clock)
    asyncio.run(instance.load_or_create_deployment_id())
    scripted.defer_next_put(IDENTITY_PATH)
    with pytest.raises(StoreUnavailable, match="outcome unknown"):
        alloc_sync(instance, clock)
    (deferred,) = scripted.deferred
    asyncio.run(deferred.apply())  # the proposal for 1 lands late
    assert read_head(inner_store).checkpoint_id == 1
    assert alloc_sync(DecisionStore.shared(inner_store, clock=clock), clock) == 2
    # The instance that proposed 1 never returns it: its stale CAS fails and it re-reads.
    assert alloc_sync(instance, clock) == 3


def test_cd_t21_uncertain_write_landed_and_passed(inner_store: ObjectStore, clock: Clock) -> None:
    """An ambiguous CAS whose re-read shows the head past our proposal burns it and retries."""
    scripted = ScriptedStore(inner_store)
    instance = DecisionStore.shared(scripted, clock=clock)
    asyncio.run(instance.load_or_create_deployment_id())
    other = DecisionStore.shared(inner_store, clock=clock)
    asyncio.run(other.load_or_create_deployment_id())

    async def advance_other(key: str) -> None:
        if key == IDENTITY_PATH and scripted.before_get is not None:
            scripted.before_get = None
            await alloc(other, clock)  # lands 1 first, then our deferred proposal fails

    scripted.defer_next_put(IDENTITY_PATH)
    scripted.before_get = advance_other
    assert alloc_sync(instance, clock) == 2
    (deferred,) = scripted.deferred
    with pytest.raises(PreconditionFailed):
        asyncio.run(deferred.apply())  # the stale proposal for 1 can never land now
    assert read_head(inner_store).checkpoint_id == 2


def test_cd_t22_concurrent_allocations_unique(
    open_shared: Callable[[], DecisionStore], clock: Clock, backend: str
) -> None:
    # 64 racing fresh instances cost O(64^2) CAS attempts; the S3 test server serves ~300
    # requests/s, so it runs the race with 16 instances (~600 requests).
    tasks = 16 if backend == "s3" else 64
    failures: list[StoreUnavailable] = []

    async def allocate_retrying(instance: DecisionStore) -> int:
        # As a coordinator does: retry StoreUnavailable within the deadline (moto answers some
        # concurrent requests 500).
        async def once() -> int:
            try:
                return await alloc(instance, clock)
            except StoreUnavailable as error:
                failures.append(error)
                raise

        return await retry_until(once, what="allocate", clock=clock, deadline=deadline(clock))

    async def main() -> list[int]:
        instances = [open_shared() for _ in range(tasks)]
        return list(await asyncio.gather(*(allocate_retrying(one) for one in instances)))

    results = asyncio.run(main())
    assert len(set(results)) == tasks  # CD-1
    if not failures:
        assert sorted(results) == list(range(1, tasks + 1))  # no ID burned: no gaps either


def test_cd_t22_concurrent_allocations_one_instance(
    open_shared: Callable[[], DecisionStore], clock: Clock
) -> None:
    instance = open_shared()

    async def main() -> list[int]:
        return list(await asyncio.gather(*(alloc(instance, clock) for _ in range(32))))

    assert sorted(asyncio.run(main())) == list(range(1, 33))


def test_cd_t23_head_regression_detected(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    instance = open_shared()
    assert alloc_sync(instance, clock, 5) == 5
    head = read_head(shared_store)
    overwrite_head(
        shared_store, with_changes(head, checkpoint_id=3, allocation_id=str(clock.uuid7()))
    )
    with pytest.raises(CorruptRecord, match="regressed from 5 to 3"):
        alloc_sync(instance, clock)


def test_cd_t24_head_same_id_different_token(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    instance = open_shared()
    assert alloc_sync(instance, clock, 5) == 5
    head = read_head(shared_store)
    overwrite_head(shared_store, with_changes(head, allocation_id=str(clock.uuid7())))
    with pytest.raises(CorruptRecord, match="changed allocation identity without advancing"):
        alloc_sync(instance, clock)


def test_cd_t25_id_space_exhausted(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    assert alloc_sync(open_shared(), clock, U64_MAX - 1) == U64_MAX - 1
    instance = open_shared()
    assert alloc_sync(instance, clock) == U64_MAX
    with pytest.raises(Refused, match="exhausted"):
        alloc_sync(instance, clock)
    with pytest.raises(Refused, match="exhausted"):
        alloc_sync(open_shared(), clock)
    assert read_head(shared_store).checkpoint_id == U64_MAX


# Bounds and faults beyond the scenario table.


def test_cd12_shared_store_without_update_is_unavailable(
    inner_store: ObjectStore, clock: Clock
) -> None:
    scripted = ScriptedStore(inner_store)
    scripted.reject_updates = True
    with pytest.raises(StoreUnavailable, match="PutMode::Update"):
        alloc_sync(DecisionStore.shared(scripted, clock=clock), clock)


def test_minimum_out_of_range_refused_without_io(clock: Clock) -> None:
    scripted = ScriptedStore(ObstoreStore.memory())
    instance = DecisionStore.shared(scripted, clock=clock)
    for bad in (U64_MAX + 1, -1, True):
        with pytest.raises(InvalidArgument):
            alloc_sync(instance, clock, bad)
    assert sum(scripted.requests.values()) == 0


def test_deadline_passed_raises_deadline_exceeded(inner_store: ObjectStore) -> None:
    clock = SimulatedClock(seed=7)
    instance = DecisionStore.shared(inner_store, clock=clock)
    with pytest.raises(DeadlineExceeded):
        asyncio.run(instance.allocate_checkpoint_id_at_least(1, deadline=clock.monotonic() - 1))


def test_deadline_bounds_a_hung_store(clock: Clock) -> None:
    scripted = ScriptedStore(ObstoreStore.memory())
    instance = DecisionStore.shared(scripted, clock=clock)
    asyncio.run(instance.load_or_create_deployment_id())
    instance.ctx.cached_head = None
    hang = asyncio.Event()

    async def hang_get(key: str) -> None:
        await hang.wait()

    scripted.before_get = hang_get
    with pytest.raises(DeadlineExceeded):
        asyncio.run(instance.allocate_checkpoint_id_at_least(1, deadline=clock.monotonic() + 0.2))


@pytest.mark.parametrize("seed", [20240611, 7, 99])
@pytest.mark.parametrize("mode", list(AllocatorMode))
def test_cd1_random_faults_never_reuse_an_id(
    mode: AllocatorMode, seed: int, inner_store: ObjectStore, clock: Clock
) -> None:
    """CD-1/CD-2 under lost responses, phantom conflicts and conflicts reported after applying.

    The identity exists before faults start: its creation has its own tests (CD-T9)."""
    asyncio.run(DecisionStore(inner_store, clock=clock, mode=mode).load_or_create_deployment_id())
    config = FaultConfig(
        error_before_rate=0.1,
        error_after_rate=0.1,
        conflict_after_rate=0.1,
        phantom_conflict_rate=0.1,
    )
    faulty = FaultyStore(inner_store, clock=clock, seed=seed, config=config)
    instances = [DecisionStore(faulty, clock=clock, mode=mode) for _ in range(3)]

    async def main() -> list[list[int]]:
        returned: list[list[int]] = [[] for _ in instances]
        for round_ in range(200):
            index = round_ % len(instances)
            try:
                returned[index].append(await alloc(instances[index], clock))
            except StoreUnavailable:
                continue
        return returned

    returned = asyncio.run(main())
    flat = [checkpoint_id for ids in returned for checkpoint_id in ids]
    assert len(flat) > 50
    assert len(set(flat)) == len(flat)  # CD-1: never returned twice
    for ids in returned:
        assert ids == sorted(ids)  # CD-2: increasing per instance
    assert sum(faulty.stats.injected.values()) > 0
