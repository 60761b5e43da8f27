"""The leader's wait for the participants' acks of one attempt
(docs/protocols/distributed-checkpoint.md, leader steps 5-6; DC-3, DC-5).

Each poll is one listing of `manifest/`. A manifest of a fence participant not yet sealed is
verified at once: its participant is exactly the fence's (node and boot), its vnodes are exactly
the vnodes the owner map gives that node, and every partial and the output it names hash to the
digests it holds (read and hashed here; decoded and checked against the attempt, vnode and
participant). A verified participant is `Sealed`. Objects are create-only, so a manifest that
fails verification can never become valid: the collection stops with that participant
`rejected` (the leader aborts at once). A store that fails a read is retried on the next poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import Clock
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.objects import (
    EMPTY_PARTIAL_SHA256,
    gather_bounded,
    read_manifest,
    read_output,
    read_partial,
)
from laminar_cluster.coordinator.paths import (
    manifest_path,
    manifest_prefix,
    parse_manifest_path,
)
from laminar_cluster.coordinator.records import VnodePartial
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.store import ObjectStore

POLLS_MAX: Final = 1_000_000  # the loop's count bound; the deadline ends it long before


@dataclass(frozen=True, slots=True)
class Sealed:
    """A participant whose manifest and every object it names were verified."""

    participant: FenceParticipant
    vnodes: tuple[int, ...]
    manifest_sha256: str
    output_sha256: str  # the output its manifest names (verified)
    offsets: dict[str, int]  # union of its partials' source offsets


@dataclass
class Collection:
    sealed: dict[int, Sealed] = field(default_factory=dict)  # by node id
    rejected: tuple[int, str] | None = None  # (node id, why) of a manifest that cannot verify
    polls: int = 0
    store_errors: int = 0
    foreign_keys: int = 0

    def missing(self, fence: CheckpointAssignmentFence) -> list[int]:
        return [p.node_id for p in fence.participants if p.node_id not in self.sealed]


async def collect_acks(
    store: ObjectStore,
    clock: Clock,
    attempt: CheckpointAttempt,
    fence: CheckpointAssignmentFence,
    owners: Sequence[int],
    *,
    poll_s: float,
    until: float,
) -> Collection:
    """Poll until every fence participant is sealed, one is rejected, or `until` passes."""
    expected = {
        p.node_id: tuple(v for v, owner in enumerate(owners) if owner == p.node_id)
        for p in fence.participants
    }
    by_node = {p.node_id: p for p in fence.participants}
    collection = Collection()
    for _ in range(POLLS_MAX):
        collection.polls += 1
        try:
            await _poll(store, attempt, by_node, expected, collection)
        except StoreUnavailable:
            collection.store_errors += 1
        if collection.rejected is not None or len(collection.sealed) == len(by_node):
            return collection
        remaining_s = until - clock.monotonic()
        if remaining_s <= 0:
            return collection
        await clock.sleep(min(poll_s, remaining_s))
    return collection


async def _poll(
    store: ObjectStore,
    attempt: CheckpointAttempt,
    by_node: dict[int, FenceParticipant],
    expected: dict[int, tuple[int, ...]],
    collection: Collection,
) -> None:
    """One listing of the attempt's manifests, verifying every new one of the fence."""
    for meta in await store.list(manifest_prefix(attempt.checkpoint_id)):
        try:
            _, node_id = parse_manifest_path(meta.key)
        except CorruptRecord:
            collection.foreign_keys += 1  # not a manifest any participant writes: never trusted
            continue
        participant = by_node.get(node_id)
        if participant is None or node_id in collection.sealed:
            continue  # DC-5: only the fence's participants count
        try:
            sealed = await verify_participant(store, attempt, participant, expected[node_id])
        except CorruptRecord as error:
            collection.rejected = (node_id, str(error))
            return
        if sealed is not None:
            collection.sealed[node_id] = sealed


async def verify_participant(
    store: ObjectStore,
    attempt: CheckpointAttempt,
    participant: FenceParticipant,
    vnodes: tuple[int, ...],
) -> Sealed | None:
    """Verify one participant's ack (DC-3); None if its manifest is not there (yet)."""
    read = await read_manifest(store, attempt, participant.node_id)
    if read is None:
        return None
    manifest, body = read
    key = manifest_path(attempt.checkpoint_id, participant.node_id)
    if manifest.participant != participant:
        raise CorruptRecord(
            f"{key}: manifest is from boot {manifest.participant.boot_incarnation}; the fence "
            f"names boot {participant.boot_incarnation}",
            key=key,
        )
    if manifest.vnodes != vnodes:
        raise CorruptRecord(
            f"{key}: manifest covers {len(manifest.vnodes)} vnodes; the owner map gives node "
            f"{participant.node_id} {len(vnodes)} (they differ)",
            key=key,
        )
    partials: list[VnodePartial] = await gather_bounded(
        [
            _reader(store, attempt, vnode, participant, digest)
            for vnode, digest in zip(vnodes, manifest.partial_sha256, strict=True)
            if digest != EMPTY_PARTIAL_SHA256  # DC-15: cut empty, no partial to read
        ]
    )
    await read_output(store, attempt, participant, manifest.output_sha256)
    return Sealed(
        participant=participant,
        vnodes=vnodes,
        manifest_sha256=sha256_hex(body),
        output_sha256=manifest.output_sha256,
        offsets=union_offsets([p.offsets for p in partials], what=key),
    )


def union_offsets(parts: Sequence[dict[str, int]], *, what: str) -> dict[str, int]:
    """The union of source offsets; a partition cut at two different offsets is CorruptRecord."""
    union: dict[str, int] = {}
    for offsets in parts:
        for partition, offset in offsets.items():
            if union.setdefault(partition, offset) != offset:
                raise CorruptRecord(
                    f"{what}: source partition {partition} is cut at offsets {union[partition]} "
                    f"and {offset}"
                )
    return union


def _reader(
    store: ObjectStore,
    attempt: CheckpointAttempt,
    vnode: int,
    participant: FenceParticipant,
    digest: str,
) -> Callable[[], Awaitable[VnodePartial]]:
    async def read() -> VnodePartial:
        return await read_partial(store, attempt, vnode, participant, digest)

    return read
