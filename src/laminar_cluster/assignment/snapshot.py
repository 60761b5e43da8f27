"""`AssignmentSnapshotStore`: create-only, per-version assignment history (AS §2.11,
AS §6.1; protocol doc docs/protocols/assignment-snapshots.md, invariants AS-n).

Four namespaces (`paths`): raw snapshots (seed v1 and every rotation), drain finalizations (one
terminal per draining version), recovery materializations (authority-admitted successors, which
readers prefer), and content-addressed recovery proposals. Every write is create-only, so any
object store works without conditional overwrite.

Results are values: `Rotated(snapshot)` when this call's object is (now) durable, or
`Conflict(winner)` when another writer's object won the version. Errors: InvalidArgument for a
deterministic refusal (`Invalid` in AS §2.11), CorruptRecord for bad durable bytes (`Json`),
StoreUnavailable / WriteOutcomeUnknown for I/O (`Io`; the second is ambiguous).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.head_hint import hint_of, publish_hint, read_hint, repair_hint
from laminar_cluster.assignment.model import (
    new_finalization,
    validate_snapshot,
)
from laminar_cluster.assignment.paths import (
    FINALIZATIONS_PREFIX,
    HEAD_HINT_PATH,
    finalization_path,
    materialization_path,
    parse_version_name,
    proposal_path,
    proposals_prefix,
    snapshot_path,
)
from laminar_cluster.assignment.records import (
    AssignmentSnapshot,
    DrainFinalization,
    HeadState,
    RecoveryMaterialization,
)
from laminar_cluster.assignment.snapshot_io import (
    MAX_SNAPSHOT_BYTES,
    MAX_WRAPPED_SNAPSHOT_BYTES,
    inventory,
    load_effective,
    load_effective_state,
    load_finalization,
    load_materialization,
    load_raw,
    require,
    snapshot_ref,
)
from laminar_cluster.codec import decode, encode_checked
from laminar_cluster.codec.shape import ShapeViolation, reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectNotFound,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentSnapshotRef,
    AssignmentVerdict,
)
from laminar_cluster.lease.validate_decisions import validate_snapshot_ref
from laminar_cluster.store import CREATE, ObjectStore, ReadBack, put_resolved
from laminar_cluster.store.record_cache import caching, record_cache

# AS §2.11 prune: at most 4 batches of 64 staged proposals per version and pass.
PROPOSAL_PRUNE_BATCH: Final = 64
PROPOSAL_PRUNE_BATCHES_MAX: Final = 4
FINALIZATION_PRUNE_PAGES_MAX: Final = 16


@dataclass(frozen=True, slots=True)
class Rotated:
    """This call's object is durable at its version."""

    snapshot: AssignmentSnapshot


@dataclass(frozen=True, slots=True)
class Conflict:
    """Another writer won the version; obey `winner` (None only if it was pruned since)."""

    winner: AssignmentSnapshot | None


RotateResult = Rotated | Conflict


class AssignmentSnapshotStore:
    """The assignment snapshot store over one ObjectStore (AS §6.1). Also satisfies
    `authority.assignment_decisions.AssignmentSnapshotSource`."""

    def __init__(self, store: ObjectStore) -> None:
        # Every object here is create-only: this instance remembers what it read and verified
        # (`store.record_cache`), and the head hint's version it last loaded in full at.
        self._store = caching(store)
        self._seen: _SeenHead | None = None
        self._loaded: tuple[AssignmentSnapshot, HeadState] | None = None  # the last full load

    @property
    def store(self) -> ObjectStore:
        return self._store

    async def head_version(self) -> int | None:
        versions = await inventory(self._store)
        return versions[-1] if versions else None

    async def load(self) -> AssignmentSnapshot | None:
        """The head generation with the AS §2.11 overlay, or None for an empty store."""
        found = await self._load_state()
        return None if found is None else found[0]

    async def _load_state(self) -> tuple[AssignmentSnapshot, HeadState] | None:
        head = await self.head_version()
        if head is None:
            return None
        found = await load_effective_state(self._store, head)
        if found is None:  # AS-2: the listed head vanished (a racing prune): report it
            raise CorruptRecord(
                f"{snapshot_path(head)}: listed head vanished", key=snapshot_path(head)
            )
        self._loaded = found
        return found

    async def load_watched(self, *, full: bool = False) -> AssignmentSnapshot | None:
        """The head as `load` gives it, for a watcher that asks every tick (AS §2.14): one
        conditional read of the head hint, and the full load (the inventory LIST and the head's
        objects) only when the hint changed since this instance's last full load, when that
        load could not be tied to a hint version, or when `full` (the caller's periodic
        re-read, which bounds how long a writer that died before its hint goes unseen, and
        which forgets every object this instance verified, so they are verified again). A full
        load that finds the hint wrong repairs it (`head_hint.repair_hint`)."""
        cache = record_cache(self._store)
        if full and cache is not None:
            cache.clear()  # a full re-read verifies the head's objects again, too
        seen = await read_hint(self._store)
        last = self._seen
        if not full and last is not None and seen.e_tag is not None and last.e_tag == seen.e_tag:
            return last.snapshot
        snapshot = await self.load()
        found = self._loaded
        hint = None
        if snapshot is not None and found is not None and found[0] is snapshot:
            hint = hint_of(*found)  # (another task's load may have replaced it meanwhile)
            await repair_hint(self._store, seen, hint)
        watched = None if cache is None else cache.watched(HEAD_HINT_PATH)
        # Tied to the hint version that names exactly this head (an empty store never is).
        tied = watched is not None and hint is not None and watched.value == hint
        e_tag = watched.e_tag if tied and watched is not None else None
        self._seen = _SeenHead(e_tag=e_tag, snapshot=snapshot)
        return snapshot

    def watched_state(self, snapshot: AssignmentSnapshot) -> HeadState | None:
        """Which object decides `snapshot`, when it is the head this instance last loaded in
        full (None otherwise)."""
        loaded = self._loaded
        return loaded[1] if loaded is not None and loaded[0] is snapshot else None

    async def load_version(self, version: int) -> AssignmentSnapshot | None:
        return await load_effective(self._store, version)

    async def load_drain_transition(self, version: int) -> AssignmentDrainTransition | None:
        """The raw draining object's transition (it survives finalization); None for a
        recovery materialization or a committed raw object (AS §2.11)."""
        if await load_materialization(self._store, version) is not None:
            return None
        raw = await load_raw(self._store, version)
        return None if raw is None else raw.drain_transition

    async def save_if_absent(self, snapshot: AssignmentSnapshot) -> AssignmentSnapshot | None:
        """Seed v1 (AS-1); the snapshot, or None when another v1 is already durable."""
        require(snapshot.assignment_version == 1, "save_if_absent only seeds version 1")
        body = _encode_snapshot(snapshot)
        head = await self.head_version()
        require(head in (None, 1), f"save_if_absent: head is already version {head}")
        resolution = await put_resolved(self._store, snapshot_path(1), body, CREATE)
        if not _landed(resolution.state, snapshot_path(1)):
            return None
        await publish_hint(self._store, hint_of(snapshot, HeadState.COMMITTED))
        return snapshot

    async def save_if_version(self, snapshot: AssignmentSnapshot, prior: int) -> RotateResult:
        """Create version prior + 1 only (AS-3: monotonic +1, one winner per version).

        `Rotated` also when the version already holds exactly `snapshot` (a retry after an
        ambiguous create, AS-3), `Conflict(winner)` otherwise."""
        body = _encode_snapshot(snapshot)
        target = prior + 1
        require(snapshot.assignment_version == target, "save_if_version is monotonic +1 only")
        head = await self.head_version()
        if head == target:  # a retry after an ambiguous create may find its own object
            return await self._hinted(
                _rotated_or_conflict(snapshot, await self.load_version(target))
            )
        require(head == prior, f"save_if_version: head is {head}, not prior {prior}")
        resolution = await put_resolved(self._store, snapshot_path(target), body, CREATE)
        if _landed(resolution.state, snapshot_path(target)):
            return await self._hinted(Rotated(snapshot))
        return await self._hinted(_rotated_or_conflict(snapshot, await self.load_version(target)))

    async def _hinted(self, result: RotateResult, state: HeadState | None = None) -> RotateResult:
        """`result`, after publishing the head hint of this call's object when it is durable
        (a raw object's state is its own; `state` names the overlay's)."""
        if isinstance(result, Rotated):
            snapshot = result.snapshot
            if state is None:
                state = HeadState.DRAINING if snapshot.draining else HeadState.COMMITTED
            await publish_hint(self._store, hint_of(snapshot, state))
        return result

    async def finalize_drain(
        self,
        draining: AssignmentSnapshot,
        proposal: AssignmentSnapshot,
        decision: AssignmentDrainDecision,
    ) -> RotateResult:
        """Write the single terminal of `draining` (AS-4), as `decision` settled it (AS-6)."""
        with writing("assignment drain finalization"):
            finalization = new_finalization(draining, proposal)
            _check_decision(draining, proposal, decision)
        body = encode_checked(
            finalization, what="assignment drain finalization", max_bytes=MAX_WRAPPED_SNAPSHOT_BYTES
        )
        version = draining.assignment_version
        head = await self.head_version()
        require(head == version, f"finalize_drain: head is {head}, not draining version {version}")
        if await load_raw(self._store, version) != draining:
            return Conflict(await self.load_version(version))
        existing = await load_finalization(self._store, draining)
        if existing is not None:
            return await self._hinted(_finalized(existing, proposal), HeadState.FINALIZED)
        resolution = await put_resolved(self._store, finalization_path(version), body, CREATE)
        if resolution.state is ReadBack.OURS:
            return await self._hinted(Rotated(proposal), HeadState.FINALIZED)
        winner = await load_finalization(self._store, draining)
        if winner is None:
            raise WriteOutcomeUnknown(
                f"{finalization_path(version)}: create not settled", key=finalization_path(version)
            )
        return await self._hinted(_finalized(winner, proposal), HeadState.FINALIZED)

    async def stage_recovery_proposal(self, proposal: AssignmentSnapshot) -> AssignmentSnapshotRef:
        """Stage a committed successor (version >= 2) under its content address; idempotent."""
        body = _encode_snapshot(proposal)
        require(not proposal.draining, "a recovery proposal must be committed")
        require(proposal.assignment_version >= 2, "a recovery proposal is version 2 or more")
        ref = snapshot_ref(proposal)
        key = proposal_path(ref.version, ref.sha256)
        resolution = await put_resolved(self._store, key, body, CREATE)
        if resolution.state is not ReadBack.OURS:  # AS-5: content addressing admits one body
            raise CorruptRecord(f"{key}: staged proposal is not its addressed bytes", key=key)
        return ref

    async def load_recovery_proposal_snapshot(
        self, ref: AssignmentSnapshotRef
    ) -> AssignmentSnapshot:
        """The staged proposal `ref` addresses, verified byte-exact (AS-5)."""
        with writing("assignment snapshot reference"):
            validate_snapshot_ref(ref)
        key = proposal_path(ref.version, ref.sha256)
        cache = record_cache(self._store)
        known = None if cache is None else cache.cached(key, AssignmentSnapshot)
        if known is not None and snapshot_ref(known) == ref:
            return known  # content addressed: verified when it was first read
        try:
            result = await self._store.get(key, end=ref.encoded_len + 1)
        except ObjectNotFound:
            raise InvalidArgument(f"{key}: recovery proposal is not staged") from None
        if len(result.body) != ref.encoded_len:
            raise CorruptRecord(
                f"{key}: is {len(result.body)} bytes; ref says {ref.encoded_len}", key=key
            )
        snapshot = decode(result.body, AssignmentSnapshot, key=key, max_bytes=MAX_SNAPSHOT_BYTES)
        with reading(key):
            validate_snapshot(snapshot)
            if snapshot.draining or snapshot_ref(snapshot) != ref:
                raise ShapeViolation("staged proposal does not match its reference")
        if cache is not None:
            cache.remember(key, snapshot, len(result.body))
        return snapshot

    async def load_recovery_proposal(self, ref: AssignmentSnapshotRef) -> CheckpointAssignmentFence:
        """AssignmentSnapshotSource: the fence of the staged proposal `ref`."""
        return validate_snapshot(await self.load_recovery_proposal_snapshot(ref))

    async def load_current(self) -> tuple[CheckpointAssignmentFence, bool] | None:
        """AssignmentSnapshotSource: the head's fence and whether it is draining."""
        head = await self.load()
        return None if head is None else (validate_snapshot(head), head.draining)

    async def materialize_recovery(self, ref: AssignmentSnapshotRef) -> RotateResult:
        """Install staged proposal `ref` at its version (authority-internal: the caller is
        `authority.assignment_decisions.materialize_assignment_recovery`, which checked the
        admitted decision, AS-6). Readers prefer this record over a raw object (AS-7)."""
        snapshot = await self.load_recovery_proposal_snapshot(ref)
        head = await self.head_version()
        require(
            head in (ref.version - 1, ref.version),
            f"materialize_recovery: head is {head}, not {ref.version - 1} or {ref.version}",
        )
        record = RecoveryMaterialization(version=1, proposal=ref, snapshot=snapshot)
        body = encode_checked(
            record, what="recovery materialization", max_bytes=MAX_WRAPPED_SNAPSHOT_BYTES
        )
        key = materialization_path(ref.version)
        resolution = await put_resolved(self._store, key, body, CREATE)
        winner = await load_materialization(self._store, ref.version)
        if winner is None:
            raise WriteOutcomeUnknown(f"{key}: create not settled", key=key)
        if resolution.state is ReadBack.OURS and winner == record:
            return await self._hinted(Rotated(snapshot), HeadState.MATERIALIZED)
        return Conflict(winner.snapshot)

    async def prune_before(self, before: int) -> None:
        """Delete every version < `before` in all four namespaces (AS-8); callers pass v - 1."""
        if before == 0:
            return
        for version in await inventory(self._store):
            if version >= before:
                break
            await self._prune_proposals(version)
            await self._store.delete(snapshot_path(version))
            await self._store.delete(materialization_path(version))
        await self._prune_finalizations(before)

    async def _prune_proposals(self, version: int) -> None:
        prefix = proposals_prefix(version)
        for _ in range(PROPOSAL_PRUNE_BATCHES_MAX):
            batch = await self._store.list(prefix, limit=PROPOSAL_PRUNE_BATCH)
            for meta in batch:
                await self._store.delete(meta.key)
            if len(batch) < PROPOSAL_PRUNE_BATCH:
                return
        if await self._store.list(prefix, limit=1):
            raise InvalidArgument(f"{prefix}: staged proposals remain after the bounded prune")

    async def _prune_finalizations(self, before: int) -> None:
        offset: str | None = None
        for _ in range(FINALIZATION_PRUNE_PAGES_MAX):
            page = await self._store.list(FINALIZATIONS_PREFIX, offset=offset, limit=1_000)
            for meta in page:
                version = parse_version_name(meta.key[len(FINALIZATIONS_PREFIX) :])
                if version is not None and version < before:
                    await self._store.delete(meta.key)
            if len(page) < 1_000:
                return
            offset = page[-1].key
        raise InvalidArgument(f"{FINALIZATIONS_PREFIX}: too many finalizations to prune")


@dataclass(frozen=True, slots=True)
class _SeenHead:
    """The last full load of `load_watched`: the head hint's e_tag it is tied to (None: not
    tied to any, so the next call loads in full) and the head it found."""

    e_tag: str | None
    snapshot: AssignmentSnapshot | None


def _encode_snapshot(snapshot: AssignmentSnapshot) -> bytes:
    with writing(f"assignment snapshot {snapshot.assignment_version}"):
        validate_snapshot(snapshot)
    return encode_checked(snapshot, what="assignment snapshot", max_bytes=MAX_SNAPSHOT_BYTES)


def _landed(state: ReadBack, key: str) -> bool:
    if state is ReadBack.ABSENT:  # the create answered in doubt and nothing is visible yet
        raise WriteOutcomeUnknown(f"{key}: create not settled", key=key)
    return state is ReadBack.OURS


def _rotated_or_conflict(
    ours: AssignmentSnapshot, winner: AssignmentSnapshot | None
) -> RotateResult:
    return Rotated(ours) if winner == ours else Conflict(winner)


def _finalized(winner: DrainFinalization, ours: AssignmentSnapshot) -> RotateResult:
    return Rotated(ours) if winner.proposal == ours else Conflict(winner.proposal)


def _check_decision(
    draining: AssignmentSnapshot, proposal: AssignmentSnapshot, decision: AssignmentDrainDecision
) -> None:
    """AS-6: the terminal is what the authority's drain decision for this version says:
    the same transition, Commit -> the target, Abort -> the rollback."""
    if decision.transition != draining.drain_transition:
        raise ShapeViolation("drain decision is for another transition than the draining snapshot")
    is_target = validate_snapshot(proposal) == decision.transition.target
    if is_target != (decision.verdict is AssignmentVerdict.COMMIT):
        raise ShapeViolation(
            f"drain decision verdict {decision.verdict.value} does not match the proposal"
        )
