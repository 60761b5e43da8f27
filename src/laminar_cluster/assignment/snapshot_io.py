"""Bounded, strictly decoded reads and create-only writes of the assignment snapshot store
(AS §2.11): the inventory LIST and the per-object GETs used by `snapshot`.

Every GET asks for at most max+1 bytes and decodes strictly and canonically (`codec.decode`);
every record is validated after reading (`reading(key)` turns a rule violation into
CorruptRecord naming the object). Every object is create-only, so with a `store.record_cache`
(the snapshot store's) a record that passed its checks is read once and remembered
(`load_immutable`); absence is never remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from laminar_cluster.assignment.model import validate_finalization, validate_snapshot
from laminar_cluster.assignment.paths import (
    MATERIALIZATIONS_PREFIX,
    SNAPSHOTS_PREFIX,
    finalization_path,
    materialization_path,
    parse_version_name,
    snapshot_path,
)
from laminar_cluster.assignment.records import (
    AssignmentSnapshot,
    DrainFinalization,
    HeadState,
    RecoveryMaterialization,
)
from laminar_cluster.codec import Record, decode, encode, sha256_hex
from laminar_cluster.codec.shape import ShapeViolation, reading
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.lease.records import AssignmentSnapshotRef
from laminar_cluster.lease.validate_decisions import MAX_ASSIGNMENT_SNAPSHOT_BYTES
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.record_cache import record_cache

# AS §2.11: a proposal is <= 8 MiB; a materialization or finalization wraps one in <= 1 KiB more.
MAX_SNAPSHOT_BYTES: Final = MAX_ASSIGNMENT_SNAPSHOT_BYTES
MAX_WRAPPED_SNAPSHOT_BYTES: Final = MAX_ASSIGNMENT_SNAPSHOT_BYTES + 1_024
# The inventory is one bounded LIST: pruning keeps two versions, so thousands mean a leak.
INVENTORY_PAGE_OBJECTS: Final = 1_000
INVENTORY_PAGES_MAX: Final = 4

R = TypeVar("R", bound=Record)


async def get_record(store: ObjectStore, key: str, type_: type[R], max_bytes: int) -> R | None:
    """The record at `key`, strictly decoded, or None when absent."""
    read = await _get_sized(store, key, type_, max_bytes)
    return None if read is None else read[0]


async def _get_sized(
    store: ObjectStore, key: str, type_: type[R], max_bytes: int
) -> tuple[R, int] | None:
    try:
        result = await store.get(key, end=max_bytes + 1)
    except ObjectNotFound:
        return None
    return decode(result.body, type_, key=key, max_bytes=max_bytes), len(result.body)


async def load_immutable(
    store: ObjectStore, key: str, type_: type[R], max_bytes: int, check: Callable[[R], None]
) -> R | None:
    """The create-only record at `key`, strictly decoded and passed through `check` (which
    raises on a rule violation), or None when absent. With a `store.record_cache`, a record
    that passed once is remembered and only `check` runs again (it is pure)."""
    cache = record_cache(store)
    hit = None if cache is None else cache.cached(key, type_)
    if hit is not None:
        check(hit)
        return hit
    read = await _get_sized(store, key, type_, max_bytes)
    if read is None:
        return None
    record, size_bytes = read
    check(record)
    if cache is not None:
        cache.remember(key, record, size_bytes)
    return record


async def inventory(store: ObjectStore) -> list[int]:
    """The sorted, de-duplicated, contiguous versions of the snapshot namespace (AS §2.11).

    A `v…` name that is not exactly `v` + 20 digits + `.json` (version >= 1), or a
    materialization name that is not one of version >= 2, fails the load (it would hide a split
    history); other siblings are ignored. A gap fails the load ("not contiguous").
    """
    versions: set[int] = set()
    offset: str | None = None
    for _ in range(INVENTORY_PAGES_MAX):
        page = await store.list(SNAPSHOTS_PREFIX, offset=offset, limit=INVENTORY_PAGE_OBJECTS)
        for meta in page:
            version = _listed_version(meta.key)
            if version is not None:
                versions.add(version)
        if len(page) < INVENTORY_PAGE_OBJECTS:
            break
        offset = page[-1].key
    else:
        raise CorruptRecord(
            f"{SNAPSHOTS_PREFIX}: inventory exceeds "
            f"{INVENTORY_PAGES_MAX * INVENTORY_PAGE_OBJECTS} objects",
            key=SNAPSHOTS_PREFIX,
        )
    ordered = sorted(versions)
    # AS-2: a gap means a split or half-pruned history; never read a head from it.
    if ordered and ordered[-1] - ordered[0] + 1 != len(ordered):
        raise CorruptRecord(
            f"{SNAPSHOTS_PREFIX}: assignment snapshot versions are not contiguous: "
            f"{len(ordered)} versions span {ordered[0]}..{ordered[-1]}",
            key=SNAPSHOTS_PREFIX,
        )
    return ordered


def _listed_version(key: str) -> int | None:
    if key.startswith(MATERIALIZATIONS_PREFIX):
        version = parse_version_name(key[len(MATERIALIZATIONS_PREFIX) :])
        if version is None or version < 2:
            raise CorruptRecord(f"{key}: not a recovery materialization of version >= 2", key=key)
        return version
    name = key[len(SNAPSHOTS_PREFIX) :]
    if "/" in name or not name.startswith("v"):
        return None  # a foreign sibling (AS §2.11: ignored)
    version = parse_version_name(name)
    if version is None or version < 1:
        raise CorruptRecord(f"{key}: snapshot name is not v + 20 digits + .json", key=key)
    return version


async def load_raw(store: ObjectStore, version: int) -> AssignmentSnapshot | None:
    """The raw snapshot object of `version`, validated, whose payload version is `version`."""
    key = snapshot_path(version)

    def check(snapshot: AssignmentSnapshot) -> None:
        with reading(key):  # AS-9: validate after reading; the path names the version
            validate_snapshot(snapshot)
            _require_version(snapshot, version)

    return await load_immutable(store, key, AssignmentSnapshot, MAX_SNAPSHOT_BYTES, check)


async def load_materialization(store: ObjectStore, version: int) -> RecoveryMaterialization | None:
    """The recovery materialization of `version`, validated: committed, at its path version,
    and its snapshot is the exact content its proposal reference addresses."""
    key = materialization_path(version)

    def check(found: RecoveryMaterialization) -> None:
        with reading(key):
            validate_snapshot(found.snapshot)
            _require_version(found.snapshot, version)
            if found.snapshot.draining or found.proposal != snapshot_ref(found.snapshot):
                raise ShapeViolation("recovery materialization is not its committed proposal")

    return await load_immutable(
        store, key, RecoveryMaterialization, MAX_WRAPPED_SNAPSHOT_BYTES, check
    )


async def load_finalization(
    store: ObjectStore, draining: AssignmentSnapshot
) -> DrainFinalization | None:
    """The finalization of the draining version `draining`, validated against it."""
    key = finalization_path(draining.assignment_version)

    def check(found: DrainFinalization) -> None:
        with reading(key):
            validate_finalization(found, draining)

    return await load_immutable(store, key, DrainFinalization, MAX_WRAPPED_SNAPSHOT_BYTES, check)


async def load_effective(store: ObjectStore, version: int) -> AssignmentSnapshot | None:
    """AS §2.11 overlay: the recovery materialization first, else the raw object, replaced by its
    finalization's proposal when it is draining and finalized. None if absent or pruned."""
    found = await load_effective_state(store, version)
    return None if found is None else found[0]


async def load_effective_state(
    store: ObjectStore, version: int
) -> tuple[AssignmentSnapshot, HeadState] | None:
    """`load_effective`, with which object decided it (`HeadState`)."""
    materialized = await load_materialization(store, version)
    if materialized is not None:  # AS-7: the recovery namespace outranks the raw object
        return materialized.snapshot, HeadState.MATERIALIZED
    raw = await load_raw(store, version)
    if raw is None:
        return None
    if not raw.draining:
        return raw, HeadState.COMMITTED
    finalization = await load_finalization(store, raw)
    if finalization is None:
        return raw, HeadState.DRAINING
    return finalization.proposal, HeadState.FINALIZED


def snapshot_ref(snapshot: AssignmentSnapshot) -> AssignmentSnapshotRef:
    """The content address of a committed snapshot's canonical compact encoding (AS §2.6)."""
    body = encode(snapshot)
    return AssignmentSnapshotRef(
        version=snapshot.assignment_version, sha256=sha256_hex(body), encoded_len=len(body)
    )


def _require_version(snapshot: AssignmentSnapshot, version: int) -> None:
    if snapshot.assignment_version != version:
        raise ShapeViolation(
            f"payload version {snapshot.assignment_version} is not path version {version}"
        )


def require(condition: bool, message: str) -> None:
    """An explicit check guarding a durable write (survives `python -O`)."""
    if not condition:
        raise InvalidArgument(message)
