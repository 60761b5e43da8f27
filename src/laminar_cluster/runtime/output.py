"""The committed-output reader and the reference aggregation's sink records (DC §1.9, DC §3.6;
docs/protocols/distributed-checkpoint.md).

A participant's output for one attempt (`Cut.output`, stored base64 in its manifest's
`output_b64` at `checkpoints/attempt={id:020}/manifest/node={n:020}.json`) is opaque to the
coordinator. The
reference aggregation's output is the msgspec msgpack encoding of a list of
`[key, count_delta, sum_delta]` triples: what the keyed aggregation added per key since the
participant's last committed checkpoint (`encode_aggregate_records`). `read_committed_output`
reads the manifests of every committed attempt and shows the outputs the visibility rules allow;
`aggregate_committed` folds aggregate records into count and sum per key.

The committed attempts are those with a sink commit marker (`committed.json`, DC-12: it stays
when the authority compacts or floors its outcome history), plus every live cluster Commit
without one (a leader that crashed before writing it; the next leader repairs it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec

from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_outcome_inventory,
    cluster_outcome_retention_boundary,
)
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import I64, U64, sha256_hex
from laminar_cluster.codec.types import I64_MAX, I64_MIN, U64_MAX
from laminar_cluster.coordinator.layout import layout1_error
from laminar_cluster.coordinator.objects import gather_bounded, manifest_output, read_manifest
from laminar_cluster.coordinator.paths import (
    ATTEMPTS_PREFIX,
    AttemptObject,
    is_layout1_key,
    manifest_path,
    parse_attempt_object,
    parse_manifest_path,
    sink_commit_path,
)
from laminar_cluster.coordinator.records import SinkCommit
from laminar_cluster.coordinator.sink_commits import read_sink_commit
from laminar_cluster.errors import CorruptRecord, InvalidArgument, InventoryChanged
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import DEFAULT_TTL_S
from laminar_cluster.store import ObjectStore

T = TypeVar("T")

DecodeRecords = Callable[[bytes], Sequence[T]]
LIST_PAGE_KEYS: Final = 10_000
LIST_PAGES_MAX: Final = 100_000  # the marker listing's count bound; the deadline ends it first
FLOOR_READS_MAX: Final = 4  # listings retried because the artifact floor moved during one

AggregateRecord = tuple[int, int, int]  # (key, count_delta, sum_delta)

_AGGREGATE_ENCODER: Final = msgspec.msgpack.Encoder()
_AGGREGATE_DECODER: Final = msgspec.msgpack.Decoder(list[tuple[U64, I64, I64]], strict=True)


def encode_aggregate_records(records: Iterable[AggregateRecord]) -> bytes:
    """The output bytes of `records` (msgpack list of [key, count_delta, sum_delta])."""
    triples = [(key, count, total) for key, count, total in records]
    try:
        data = _AGGREGATE_ENCODER.encode(triples)
    except (OverflowError, TypeError) as error:
        raise InvalidArgument(f"aggregate records: cannot be encoded: {error}") from error
    try:
        decode_aggregate_records(data, what="aggregate records")
    except CorruptRecord as error:  # a negative key, a delta beyond i64: refused before writing
        raise InvalidArgument(str(error)) from None
    return data


def check_aggregate_columns(
    keys: Sequence[int], count_deltas: Sequence[int], sum_deltas: Sequence[int]
) -> None:
    """InvalidArgument unless every key is within u64 and every delta within i64: what
    `encode_aggregate_records` checks by decoding, as C-level min/max scans of the columns
    (no object per record)."""
    if keys and (min(keys) < 0 or max(keys) > U64_MAX):
        raise InvalidArgument("aggregate records: a key is outside the u64 range")
    for column in (count_deltas, sum_deltas):
        if column and (min(column) < I64_MIN or max(column) > I64_MAX):
            raise InvalidArgument("aggregate records: a delta is outside the i64 range")


def encode_checked_aggregate_records(records: list[AggregateRecord]) -> bytes:
    """The output bytes of `records` whose columns passed `check_aggregate_columns` (ints
    only): encoded without another pass over them."""
    try:
        return _AGGREGATE_ENCODER.encode(records)
    except (OverflowError, TypeError) as error:
        raise InvalidArgument(f"aggregate records: cannot be encoded: {error}") from error


def decode_aggregate_records(
    data: bytes, *, what: str = "aggregate records"
) -> list[AggregateRecord]:
    """The triples `data` holds; CorruptRecord (naming `what`) if it is not exactly that."""
    try:
        return _AGGREGATE_DECODER.decode(data)
    except msgspec.ValidationError as error:
        raise CorruptRecord(f"{what}: not a list of [key, count, sum] triples: {error}") from None
    except msgspec.DecodeError as error:
        raise CorruptRecord(f"{what}: not valid msgpack: {error}") from None


@dataclass(frozen=True, slots=True)
class HiddenOutput:
    """A staged output of a committed attempt that the visibility rules keep hidden."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class CommittedOutput(Generic[T]):
    """What the committed history shows: records in attempt order, then node order."""

    records: list[T]
    attempts: tuple[int, ...]  # the committed attempts read (checkpoint IDs, ascending)
    outputs: int  # visible outputs
    hidden: tuple[HiddenOutput, ...]


@dataclass(frozen=True, slots=True)
class _Committed:
    """One committed attempt as its marker or its live Commit names it."""

    attempt: CheckpointAttempt
    capsule: RecoveryCapsuleRef
    fence: CheckpointAssignmentFence
    outputs: dict[FenceParticipant, str] | None  # the marker's output digests (None: no marker)


@dataclass(frozen=True, slots=True)
class _Attempt(Generic[T]):
    checkpoint_id: int
    visible: list[tuple[int, Sequence[T]]]  # (node id, records)
    hidden: list[HiddenOutput]


def open_output_authority(store: ObjectStore, clock: Clock) -> LeaderLeaseStore:
    """A leader authority over `store` for `read_committed_output` (which only reads)."""
    decisions = DecisionStore.shared(store, clock=clock)
    return LeaderLeaseStore(store, clock=clock, ttl_s=DEFAULT_TTL_S, decisions=decisions)


async def read_committed_output(
    authority: LeaderLeaseStore, decode_records: DecodeRecords[T], *, deadline: float
) -> CommittedOutput[T]:
    """Every committed output (DC §1.9: visible only once its attempt's cluster outcome is Commit).

    The output a manifest `checkpoints/attempt={id}/manifest/node={n}.json` holds is shown only
    if attempt `id` committed (its sink commit marker, or its live cluster Commit), its
    participant is in the committed fence and in the recovery capsule, the manifest is the one
    the capsule names (by SHA-256, DC-11), and the output's SHA-256 is the one the marker holds
    for it (DC-12). Other manifests of committed attempts, and manifests a capsule commits but
    the store lacks, are reported in `hidden`; attempts with neither a marker nor a live Commit
    (aborted, unresolved) are not read. Malformed objects, and a marker that disagrees with its
    capsule, its live Commit or a manifest, are CorruptRecord; a store of the old layout is
    InvalidArgument (`coordinator.layout`).
    """
    async with within_deadline(authority.clock, deadline, "read committed output"):
        committed, listed = await _committed_attempts(authority)
        attempts = await gather_bounded(
            functools.partial(
                _read_attempt,
                authority,
                c,
                listed.get(c.attempt.checkpoint_id, set()),
                decode_records,
            )
            for c in committed
        )
    records: list[T] = []
    hidden: list[HiddenOutput] = []
    outputs = 0
    for attempt in attempts:
        for _, attempt_records in attempt.visible:
            records.extend(attempt_records)
        outputs += len(attempt.visible)
        hidden.extend(attempt.hidden)
    return CommittedOutput(
        records=records,
        attempts=tuple(attempt.checkpoint_id for attempt in attempts),
        outputs=outputs,
        hidden=tuple(hidden),
    )


async def committed_checkpoints(authority: LeaderLeaseStore) -> tuple[int, ...]:
    """The checkpoint IDs of every committed attempt, ascending: those with a sink commit marker
    and the live Commits (below the artifact floor only markers remain, DC-14)."""
    return tuple(c.attempt.checkpoint_id for c in (await _committed_attempts(authority))[0])


async def _committed_attempts(
    authority: LeaderLeaseStore,
) -> tuple[list[_Committed], dict[int, set[int]]]:
    """Every attempt with a marker, and every live Commit without one, ascending; and the nodes
    with a manifest, by attempt. A marker at or above the artifact floor (where every Commit is
    live) must have its live Commit.

    DC-14: the leader moves the artifact floor past a Commit only once its marker is durable. So
    the artifact floor is read before the markers are listed, and the outcomes after: if the
    floor did not move in between, every Commit below it had its marker before the listing
    began, and the listing shows it. A floor that moved is read again (at most
    `FLOOR_READS_MAX` times)."""
    for _ in range(FLOOR_READS_MAX):
        before = await cluster_outcome_retention_boundary(authority)
        markers, listed = await _sink_commits(authority.store)
        inventory = await cluster_outcome_inventory(authority)  # read after the markers
        floor = inventory.retention_boundary.artifact_before_epoch
        if floor == before.artifact_before_epoch:
            return _merge(markers, inventory.outcomes, floor), listed
    raise InventoryChanged(
        f"the artifact floor moved during each of {FLOOR_READS_MAX} committed-output listings"
    )


def _merge(
    markers: list[SinkCommit], outcomes: tuple[CheckpointOutcome, ...], floor: int
) -> list[_Committed]:
    """The markers and the live Commits without one, checked against each other."""
    by_id = {c.attempt.checkpoint_id: _from_marker(c) for c in markers}
    live = {o.checkpoint_id for o in outcomes if o.is_commit()}
    for checkpoint_id, marker in by_id.items():
        if marker.attempt.epoch >= floor and checkpoint_id not in live:
            key = sink_commit_path(checkpoint_id)
            raise CorruptRecord(f"{key}: sink commit of an attempt with no live Commit", key=key)
    for outcome in outcomes:
        if not outcome.is_commit() or not outcome.attempt.is_canonical():
            continue
        checkpoint_id = outcome.checkpoint_id
        ref, fence = outcome.recovery_capsule, outcome.assignment_fence
        if ref is None or fence is None:  # never passes outcome validation; checked on principle
            raise CorruptRecord(f"cluster Commit {checkpoint_id} has no capsule or fence")
        marked = by_id.get(checkpoint_id)
        if marked is None:
            by_id[checkpoint_id] = _Committed(outcome.attempt, ref, fence, None)
        elif (marked.capsule, marked.fence) != (ref, fence):
            key = sink_commit_path(checkpoint_id)
            raise CorruptRecord(f"{key}: sink commit differs from the live cluster Commit", key=key)
    return [by_id[checkpoint_id] for checkpoint_id in sorted(by_id)]


async def _sink_commits(store: ObjectStore) -> tuple[list[SinkCommit], dict[int, set[int]]]:
    """Every marker under `checkpoints/attempt=`, and the nodes with a manifest by attempt (one
    listing of every attempt key; a key of the old layout is InvalidArgument)."""
    ids: list[int] = []
    manifests: dict[int, set[int]] = {}
    offset = None
    for _ in range(LIST_PAGES_MAX):
        page = await store.list(ATTEMPTS_PREFIX, offset=offset, limit=LIST_PAGE_KEYS)
        for meta in page:
            if is_layout1_key(meta.key):
                raise layout1_error(meta.key)  # never misread (coordinator.layout)
            try:
                checkpoint_id, kind = parse_attempt_object(meta.key)
            except CorruptRecord:
                continue  # a foreign key: never trusted
            if kind is AttemptObject.SINK_COMMIT:
                ids.append(checkpoint_id)
            elif kind is AttemptObject.MANIFEST:
                manifests.setdefault(checkpoint_id, set()).add(parse_manifest_path(meta.key)[1])
        if len(page) < LIST_PAGE_KEYS:
            break
        offset = page[-1].key
    found = await gather_bounded(functools.partial(read_sink_commit, store, i) for i in ids)
    return [commit for commit in found if commit is not None], manifests


def _from_marker(commit: SinkCommit) -> _Committed:
    outputs = {o.participant: o.output_sha256 for o in commit.outputs}
    return _Committed(commit.attempt, commit.capsule, commit.fence, outputs)


async def _read_attempt(
    authority: LeaderLeaseStore,
    committed: _Committed,
    listed: set[int],
    decode_records: DecodeRecords[T],
) -> _Attempt[T]:
    checkpoint_id = committed.attempt.checkpoint_id
    capsule = await authority.require_decisions().load_recovery_capsule(committed.capsule)
    if capsule.attempt != committed.attempt or capsule.assignment_fence != committed.fence:
        raise CorruptRecord(f"cluster Commit {checkpoint_id} does not match its recovery capsule")
    if committed.outputs is not None and list(committed.outputs) != [
        FenceParticipant(node_id=p.node_id, boot_incarnation=p.boot_incarnation)
        for p in capsule.participants
    ]:
        key = sink_commit_path(checkpoint_id)
        raise CorruptRecord(
            f"{key}: sink commit names other participants than its capsule", key=key
        )
    manifests = {(p.node_id, p.boot_incarnation): p.manifest_sha256 for p in capsule.participants}
    nodes = sorted(listed | {p.node_id for p in capsule.participants})
    found = await gather_bounded(
        functools.partial(
            _read_output, authority.store, committed, manifests, node_id, decode_records
        )
        for node_id in nodes
    )
    visible = [item for item in found if not isinstance(item, HiddenOutput)]
    hidden = [item for item in found if isinstance(item, HiddenOutput)]
    return _Attempt(checkpoint_id, visible, hidden)


async def _read_output(
    store: ObjectStore,
    committed: _Committed,
    manifests: dict[tuple[int, str], str],
    node_id: int,
    decode_records: DecodeRecords[T],
) -> tuple[int, Sequence[T]] | HiddenOutput:
    attempt = committed.attempt
    key = manifest_path(attempt.checkpoint_id, node_id)
    found = await read_manifest(store, attempt, node_id)
    if found is None:
        return HiddenOutput(key, "the manifest the capsule commits is missing")
    manifest, body = found
    participant = manifest.participant
    if participant not in committed.fence.participants:
        return HiddenOutput(key, "participant is not in the committed fence")
    expected_manifest = manifests.get((participant.node_id, participant.boot_incarnation))
    if expected_manifest is None:
        return HiddenOutput(key, "participant is not in the recovery capsule")
    if sha256_hex(body) != expected_manifest:
        return HiddenOutput(key, "manifest is not the one the recovery capsule names")
    output = manifest_output(manifest, key=key)
    if committed.outputs is not None and committed.outputs.get(participant) != sha256_hex(output):
        marker = sink_commit_path(attempt.checkpoint_id)
        raise CorruptRecord(
            f"{marker}: sink commit names another output of node {node_id}", key=marker
        )
    return node_id, decode_records(output)


def aggregate_committed(records: Iterable[AggregateRecord]) -> dict[int, tuple[int, int]]:
    """Count and sum per key over committed aggregate records (keys ascending)."""
    counts: dict[int, int] = {}
    sums: dict[int, int] = {}
    for key, count_delta, sum_delta in records:
        counts[key] = counts.get(key, 0) + count_delta
        sums[key] = sums.get(key, 0) + sum_delta
    return {key: (counts[key], sums[key]) for key in sorted(counts)}
