"""Deployment identity (CD §4.2, CD §3.5, CD §2.5; CD-T1 to CD-T10).

Shared-mode tests run on memory, file and the S3 test server; lost responses and forged reads go
through ScriptedStore over an in-memory or a file store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import AllocatorMode, DecisionStore
from laminar_cluster.checkpoint.limits import MAX_IDENTITY_BYTES
from laminar_cluster.checkpoint.paths import IDENTITY_PATH
from laminar_cluster.checkpoint.records import DeploymentIdentity
from laminar_cluster.clock import Clock
from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.store import CREATE, ObjectStore
from laminar_cluster.store.file_backend import FileStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from tests.checkpoint.conftest import deadline
from tests.support.s3server import S3Server
from tests.support.scripted_store import ScriptedStore

NIL = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(params=["memory", "file"])
def inner_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A fresh store to wrap in a ScriptedStore."""
    if request.param == "memory":
        yield ObstoreStore.memory()
    else:
        yield FileStore(str(tmp_path / "scripted"), fsync=False)


def canonical_uuid(value: str) -> bool:
    return str(uuid.UUID(value)) == value and value != NIL


def identity_body(clock: Clock, **changes: object) -> bytes:
    fields: dict[str, object] = {
        "version": 2,
        "id": str(clock.uuid7()),
        "allocator_mode": AllocatorMode.NATIVE_CAS,
        "checkpoint_id": 0,
        "allocation_id": str(clock.uuid7()),
    }
    fields.update(changes)
    return encode(DeploymentIdentity(**fields))  # type: ignore[arg-type]


def put_identity(store: ObjectStore, body: bytes) -> None:
    asyncio.run(store.put(IDENTITY_PATH, body, CREATE))


def load_error(instance: DecisionStore) -> CorruptRecord:
    with pytest.raises(CorruptRecord) as caught:
        asyncio.run(instance.load_or_create_deployment_id())
    return caught.value


def test_cd_t1_identity_create_once_across_instances(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> tuple[str, str, str]:
        first, second = open_shared(), open_shared()
        a, b = await asyncio.gather(
            first.load_or_create_deployment_id(), second.load_or_create_deployment_id()
        )
        return a, b, await open_shared().load_or_create_deployment_id()

    a, b, c = asyncio.run(main())
    assert a == b == c
    assert canonical_uuid(a)
    assert uuid.UUID(a).version == 7
    stored = asyncio.run(shared_store.get(IDENTITY_PATH))
    assert f'"id":"{a}"'.encode() in stored.body


def test_cd_t2_independent_stores_distinct_identity(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> None:
    stores: list[ObjectStore]
    if backend == "memory":
        stores = [ObstoreStore.memory(), ObstoreStore.memory()]
    elif backend == "file":
        stores = [FileStore(str(tmp_path / name), fsync=False) for name in ("a", "b")]
    else:
        from laminar_cluster.store import open_store

        server: S3Server = request.getfixturevalue("s3_server")
        stores = [open_store(server.url(server.create_bucket())) for _ in range(2)]

    async def main() -> list[str]:
        return [
            await DecisionStore.shared(store, clock=clock).load_or_create_deployment_id()
            for store in stores
        ]

    first, second = asyncio.run(main())
    assert first != second
    assert canonical_uuid(first) and canonical_uuid(second)


def test_cd_t3_legacy_identity_rejected(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore, clock: Clock
) -> None:
    body = b'{"version":1,"id":"%s"}' % str(clock.uuid7()).encode()
    put_identity(shared_store, body)
    error = load_error(open_shared())
    assert "version 1 is unsupported" in str(error)
    assert error.key == IDENTITY_PATH


def _unknown_field(body: bytes) -> bytes:
    return body[:-1] + b',"extra":1}'


def _whitespace(body: bytes) -> bytes:
    return body.replace(b',"', b', "', 1)


T4_VARIANTS = {
    "unknown_field": (lambda clock: _unknown_field(identity_body(clock)), "unknown field"),
    # The codec says "record body is not its canonical encoding" (spec: "canonical body").
    "whitespace": (lambda clock: _whitespace(identity_body(clock)), "canonical encoding"),
    "uppercase_uuid": (
        lambda clock: identity_body(clock, id=str(clock.uuid7()).upper()),
        "canonical non-nil",
    ),
    "nil_allocation_id": (
        lambda clock: identity_body(clock, allocation_id=NIL),
        "canonical non-nil",
    ),
    "braced_uuid": (
        lambda clock: identity_body(clock, id="{" + str(clock.uuid7()) + "}"),
        "canonical non-nil",
    ),
    "not_a_uuid": (lambda clock: identity_body(clock, id="deployment-1"), "not a UUID"),
}


@pytest.mark.parametrize("variant", sorted(T4_VARIANTS))
def test_cd_t4_identity_malformed_bodies(
    variant: str,
    open_shared: Callable[[], DecisionStore],
    shared_store: ObjectStore,
    clock: Clock,
) -> None:
    make_body, expected = T4_VARIANTS[variant]
    put_identity(shared_store, make_body(clock))
    error = load_error(open_shared())
    assert expected in str(error)
    assert error.key == IDENTITY_PATH


@pytest.mark.parametrize("first_mode", list(AllocatorMode))
def test_cd_t5_allocator_mode_locked(
    first_mode: AllocatorMode, make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    def open_(mode: AllocatorMode) -> DecisionStore:
        store = make_store()
        if mode is AllocatorMode.NATIVE_CAS:
            return DecisionStore.shared(store, clock=clock)
        return DecisionStore.local_single_writer(store, clock=clock)

    first = open_(first_mode)
    assert asyncio.run(first.allocate_checkpoint_id(deadline=deadline(clock))) == 1
    other_mode = next(mode for mode in AllocatorMode if mode is not first_mode)
    second = open_(other_mode)
    with pytest.raises(CorruptRecord) as caught:
        asyncio.run(second.allocate_checkpoint_id(deadline=deadline(clock)))
    message = str(caught.value)
    names = {
        AllocatorMode.NATIVE_CAS: "NativeCas",
        AllocatorMode.LOCAL_SINGLE_WRITER: "LocalSingleWriter",
    }
    assert "allocator mode" in message
    assert f"{names[first_mode]} cannot be opened as {names[other_mode]}" in message
    # The first mode still works: the refused open wrote nothing.
    assert asyncio.run(first.allocate_checkpoint_id(deadline=deadline(clock))) == 2


def test_cd_t5_allocator_mode_locked_local_filesystem(tmp_path: Path, clock: Clock) -> None:
    """The same on a real local directory: local_filesystem vs NativeCas over the same files."""
    root = tmp_path / "namespace"
    local = DecisionStore.local_filesystem(root, clock=clock, fsync=False)
    assert asyncio.run(local.allocate_checkpoint_id(deadline=deadline(clock))) == 1
    shared = DecisionStore.shared(FileStore(str(root), fsync=False), clock=clock)
    with pytest.raises(CorruptRecord, match="LocalSingleWriter cannot be opened as NativeCas"):
        asyncio.run(shared.allocate_checkpoint_id(deadline=deadline(clock)))

    other = tmp_path / "other"
    shared = DecisionStore.shared(FileStore(str(other), fsync=False), clock=clock)
    assert asyncio.run(shared.allocate_checkpoint_id(deadline=deadline(clock))) == 1
    local = DecisionStore.local_filesystem(other, clock=clock, fsync=False)
    with pytest.raises(CorruptRecord, match="NativeCas cannot be opened as LocalSingleWriter"):
        asyncio.run(local.allocate_checkpoint_id(deadline=deadline(clock)))


def test_cd_t6_oversized_identity(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    put_identity(shared_store, b"x" * (MAX_IDENTITY_BYTES + 1))
    error = load_error(open_shared())
    assert f"deployment identity is {MAX_IDENTITY_BYTES + 1} bytes" in str(error)
    assert f"maximum is {MAX_IDENTITY_BYTES}" in str(error)


@pytest.mark.parametrize("forged", ["longer_than_size", "shorter_than_size"])
def test_cd_t7_bounded_get_and_stream(forged: str, inner_store: ObjectStore, clock: Clock) -> None:
    """Our store API returns the served bytes whole, so a forged range and a forged stream are
    one case: bytes served that differ from the advertised size."""
    asyncio.run(DecisionStore.shared(inner_store, clock=clock).load_or_create_deployment_id())
    scripted = ScriptedStore(inner_store)
    if forged == "longer_than_size":
        scripted.forge_next_get(IDENTITY_PATH, body=b"{}", size=1)
    else:
        scripted.forge_next_get(IDENTITY_PATH, body=b"{", size=2)
    error = load_error(DecisionStore.shared(scripted, clock=clock))
    assert "inconsistent with advertised size" in str(error)
    # The read asked for at most max+1 bytes: never an unbounded body.
    assert scripted.get_ends == [MAX_IDENTITY_BYTES + 1]


def test_cd_t8_native_cas_requires_token(inner_store: ObjectStore, clock: Clock) -> None:
    asyncio.run(DecisionStore.shared(inner_store, clock=clock).load_or_create_deployment_id())
    scripted = ScriptedStore(inner_store)
    scripted.strip_tokens = True
    error = load_error(DecisionStore.shared(scripted, clock=clock))
    assert "deployment identity" in str(error)
    assert "neither an ETag nor an object version for CAS" in str(error)


def test_cd_t8_local_mode_needs_no_token(inner_store: ObjectStore, clock: Clock) -> None:
    """LocalSingleWriter never CASes the identity, so tokens are not required there."""
    writer = DecisionStore.local_single_writer(inner_store, clock=clock)
    created = asyncio.run(writer.load_or_create_deployment_id())
    scripted = ScriptedStore(inner_store)
    scripted.strip_tokens = True
    reader = DecisionStore.local_single_writer(scripted, clock=clock)
    assert asyncio.run(reader.load_or_create_deployment_id()) == created


def test_cd_t9_identity_lost_create_response(inner_store: ObjectStore, clock: Clock) -> None:
    scripted = ScriptedStore(inner_store)
    scripted.fail_next_put_after_apply(IDENTITY_PATH)
    instance = DecisionStore.shared(scripted, clock=clock)

    async def main() -> tuple[str, str, int]:
        loaded = await instance.load_or_create_deployment_id()
        fresh = await DecisionStore.shared(inner_store, clock=clock).load_or_create_deployment_id()
        return loaded, fresh, await instance.allocate_checkpoint_id(deadline=deadline(clock))

    loaded, fresh, first_id = asyncio.run(main())
    assert loaded == fresh  # the stored identity, adopted after the lost response
    assert canonical_uuid(loaded)
    assert scripted.requests["put"] == 2  # one create, one allocation CAS: no second create
    assert first_id == 1


def test_cd_t10_reads_create_identity(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    with pytest.raises(ObjectNotFound):
        asyncio.run(shared_store.get(IDENTITY_PATH))
    instance = open_shared()
    assert asyncio.run(instance.outcome(1)) is None
    stored = asyncio.run(shared_store.get(IDENTITY_PATH))
    deployment_id = asyncio.run(instance.load_or_create_deployment_id())
    assert f'"id":"{deployment_id}"'.encode() in stored.body
