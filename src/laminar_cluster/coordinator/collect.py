"""The leader's wait for the participants' acks of one attempt
(docs/protocols/distributed-checkpoint.md, leader steps L5-L6; DC-3, DC-5, DC-16, DC-19).

Each poll is one listing of `manifest/`, after a wait that starts at `first_wait_s` (a fraction of
the shortest of the last `LEARNED_COLLECTIONS` complete collections of prepares the participants
expected, so a steady cluster is usually found complete at the first or second poll, and a prepare
they noticed late, say a new leader's first or a pre-rotation one, does not delay the next few:
DC-18) and then backs off from `poll_s`, doubling up to `BACKOFF_MAX_S`. A
manifest of a fence participant not yet sealed is read and verified at once: its participant is
exactly the fence's (node and boot), it answers exactly this attempt's prepare (by SHA-256), its
slices cover exactly the vnodes the owner map gives that node and are well formed, and each
reference is the last committed cut's slice of that vnode (`slices.check_references`). No state
object is read: the manifest carries every digest, and a restore checks the bytes against them
(DC-10). A verified participant is `Sealed`. Objects are create-only, so a manifest that fails
verification can never become valid: the collection stops with that participant `rejected` (the
leader aborts at once). A participant the membership view holds lost (suspected, dead, left, or
superseded by another boot) while its manifest is missing ends the collection at once with it `lost`
(DC-19: the leader aborts instead of waiting for the deadline). A store that fails a read is retried
on the next poll.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from collections.abc import Collection as Container
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointAttempt, CheckpointOutcome
from laminar_cluster.clock import Clock
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.objects import manifest_output, read_manifest
from laminar_cluster.coordinator.paths import (
    manifest_path,
    manifest_prefix,
    parse_manifest_path,
)
from laminar_cluster.coordinator.records import CheckpointPrepare, VnodeSlice
from laminar_cluster.coordinator.restore import committed_slices
from laminar_cluster.coordinator.slices import CommittedSlices, check_references
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.store import ObjectStore

FIRST_WAIT_FRACTION: Final = 0.75  # of the shortest recent complete collection: the first wait
LEARNED_COLLECTIONS: Final = 4  # how many recent complete collections the first wait learns from
POLLS_MAX: Final = 1_000_000  # the loop's count bound; the deadline ends it long before
BACKOFF_MAX_S: Final = 0.2  # the longest wait between two polls of one collection

Baseline = Callable[[], Awaitable[CommittedSlices | None]]
"""The last committed cut's slices (loaded once, when a manifest holds a reference)."""

LostParticipants = Callable[[CheckpointAssignmentFence], Container[int]]
"""The node ids of `fence`'s participants the membership view holds lost (DC-19)."""


@dataclass(frozen=True, slots=True)
class Sealed:
    """A participant whose manifest was verified."""

    participant: FenceParticipant
    vnodes: tuple[int, ...]
    manifest_sha256: str
    output_sha256: str  # the SHA-256 of the output its manifest holds
    offsets: dict[str, int]  # union of its slices' source offsets
    slices: tuple[VnodeSlice, ...]


@dataclass
class Collection:
    sealed: dict[int, Sealed] = field(default_factory=dict)  # by node id
    rejected: tuple[int, str] | None = None  # (node id, why) of a manifest that cannot verify
    lost: tuple[int, ...] = ()  # participants lost before their manifest (DC-19)
    polls: int = 0
    store_errors: int = 0
    foreign_keys: int = 0

    def missing(self, fence: CheckpointAssignmentFence) -> list[int]:
        return [p.node_id for p in fence.participants if p.node_id not in self.sealed]


@dataclass(frozen=True, slots=True)
class Expected:
    """What every manifest of one attempt must answer."""

    attempt: CheckpointAttempt
    fence: CheckpointAssignmentFence
    owners: Sequence[int]
    prepare_sha256: str
    baseline: Baseline

    def vnodes_of(self, node_id: int) -> tuple[int, ...]:
        return tuple(v for v, owner in enumerate(self.owners) if owner == node_id)


async def collect_acks(
    store: ObjectStore,
    clock: Clock,
    expected: Expected,
    *,
    poll_s: float,
    first_wait_s: float,
    until: float,
    lost: LostParticipants | None = None,
) -> Collection:
    """Poll until every fence participant is sealed, one is rejected or lost, or `until`."""
    fence = expected.fence
    by_node = {p.node_id: p for p in fence.participants}
    collection = Collection()
    wait_s, backoff_s = max(poll_s, first_wait_s), poll_s
    for _ in range(POLLS_MAX):
        remaining_s = until - clock.monotonic()
        if remaining_s <= 0:
            return collection
        if not _gone(collection, fence, lost):  # a lost participant: poll at once to confirm
            await clock.sleep(min(wait_s, remaining_s))
            wait_s, backoff_s = backoff_s, min(2 * backoff_s, max(poll_s, BACKOFF_MAX_S))
        collection.polls += 1
        try:
            await _poll(store, expected, by_node, collection)
        except StoreUnavailable:
            collection.store_errors += 1
        if collection.rejected is not None or len(collection.sealed) == len(by_node):
            return collection
        collection.lost = _gone(collection, fence, lost)
        if collection.lost:
            return collection
    return collection


def _gone(
    collection: Collection, fence: CheckpointAssignmentFence, lost: LostParticipants | None
) -> tuple[int, ...]:
    """DC-19: the missing participants the membership view holds lost."""
    if lost is None:
        return ()
    gone = lost(fence)
    return tuple(n for n in collection.missing(fence) if n in gone)


async def _poll(
    store: ObjectStore,
    expected: Expected,
    by_node: dict[int, FenceParticipant],
    collection: Collection,
) -> None:
    """One listing of the attempt's manifests, verifying every new one of the fence."""
    for meta in await store.list(manifest_prefix(expected.attempt.checkpoint_id)):
        try:
            _, node_id = parse_manifest_path(meta.key)
        except CorruptRecord:
            collection.foreign_keys += 1  # not a manifest any participant writes: never trusted
            continue
        participant = by_node.get(node_id)
        if participant is None or node_id in collection.sealed:
            continue  # DC-5: only the fence's participants count
        try:
            sealed = await verify_participant(store, expected, participant)
        except CorruptRecord as error:
            collection.rejected = (node_id, str(error))
            return
        if sealed is not None:
            collection.sealed[node_id] = sealed


async def verify_participant(
    store: ObjectStore, expected: Expected, participant: FenceParticipant
) -> Sealed | None:
    """Verify one participant's ack (DC-3, DC-16); None if its manifest is not there (yet)."""
    attempt, vnodes = expected.attempt, expected.vnodes_of(participant.node_id)
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
    if manifest.prepare_sha256 != expected.prepare_sha256:
        raise CorruptRecord(f"{key}: manifest answers another prepare of this attempt", key=key)
    if tuple(s.vnode for s in manifest.slices) != vnodes:
        raise CorruptRecord(
            f"{key}: manifest covers {len(manifest.slices)} vnodes; the owner map gives node "
            f"{participant.node_id} {len(vnodes)} (they differ)",
            key=key,
        )
    if any(
        s.holder is not None and s.holder.checkpoint_id != attempt.checkpoint_id
        for s in manifest.slices
    ):
        check_references(manifest, expected.fence, await expected.baseline(), key=key)
    return Sealed(
        participant=participant,
        vnodes=vnodes,
        manifest_sha256=sha256_hex(body),
        output_sha256=sha256_hex(manifest_output(manifest, key=key)),
        offsets=union_offsets([s.offsets for s in manifest.slices], what=key),
        slices=manifest.slices,
    )


class AckCollector:
    """One leader instance's collections (L5): `committed`, the last Commit's slices it checks
    references against (read once when it did not record that Commit itself), and how long its
    last few complete collections took (the next one's first wait learns from the shortest)."""

    def __init__(
        self,
        store: ObjectStore,
        decisions: DecisionStore,
        poll_s: float,
        lost: LostParticipants | None,
    ) -> None:
        self.store = store
        self.decisions = decisions
        self.clock = decisions.ctx.clock
        self.poll_s = poll_s
        self.lost = lost
        self.committed: CommittedSlices | None = None
        self._collect_s: deque[float] = deque(maxlen=LEARNED_COLLECTIONS)

    async def collect(
        self,
        prepare: CheckpointPrepare,
        owners: Sequence[int],
        body: bytes,
        previous: CheckpointOutcome | None,
        *,
        until: float,
        learn: bool = True,
    ) -> Collection:
        """`collect_acks` for the prepare whose bytes are `body`, `previous` the last Commit.
        `learn`: a complete collection teaches the first wait (False for a prepare participants
        did not expect, which they notice later: DC-18)."""
        started_s = self.clock.monotonic()

        async def baseline() -> CommittedSlices | None:
            return await self.baseline(previous)

        expected = Expected(prepare.attempt, prepare.fence, owners, sha256_hex(body), baseline)
        collection = await collect_acks(
            self.store,
            self.clock,
            expected,
            poll_s=self.poll_s,
            first_wait_s=FIRST_WAIT_FRACTION * min(self._collect_s, default=0.0),
            until=until,
            lost=self.lost,
        )
        if learn and not collection.missing(prepare.fence):
            self._collect_s.append(self.clock.monotonic() - started_s)
        return collection

    async def baseline(self, previous: CheckpointOutcome | None) -> CommittedSlices | None:
        """DC-16: the slices of the previous Commit, from memory or read once (its capsule and
        manifests)."""
        if previous is None or previous.recovery_capsule is None:
            return None
        committed = self.committed
        if committed is None or committed.checkpoint_id != previous.checkpoint_id:
            ref = previous.recovery_capsule
            committed = self.committed = await committed_slices(self.store, self.decisions, ref)
        return committed


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
