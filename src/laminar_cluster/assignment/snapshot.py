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

from laminar_cluster.assignment.model import (
    new_finalization,
    validate_snapshot,
)
from laminar_cluster.assignment.paths import (
    FINALIZATIONS_PREFIX,
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
    RecoveryMaterialization,
)
from laminar_cluster.assignment.snapshot_io import (
    MAX_SNAPSHOT_BYTES,
    MAX_WRAPPED_SNAPSHOT_BYTES,
    inventory,
    load_effective,
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
        self._store = store

    @property
    def store(self) -> ObjectStore:
        return self._store

    async def head_version(self) -> int | None:
        versions = await inventory(self._store)
        return versions[-1] if versions else None

    async def load(self) -> AssignmentSnapshot | None:
        """The head generation with the AS §2.11 overlay, or None for an empty store."""
        head = await self.head_version()
        if head is None:
            return None
        snapshot = await load_effective(self._store, head)
        if snapshot is None:  # AS-2: the listed head vanished (a racing prune): report it
            raise CorruptRecord(
                f"{snapshot_path(head)}: listed head vanished", key=snapshot_path(head)
            )
        return snapshot

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
        return snapshot if _landed(resolution.state, snapshot_path(1)) else None

    async def save_if_version(self, snapshot: AssignmentSnapshot, prior: int) -> RotateResult:
        """Create version prior + 1 only (AS-3: monotonic +1, one winner per version).

        `Rotated` also when the version already holds exactly `snapshot` (a retry after an
        ambiguous create, AS-3), `Conflict(winner)` otherwise."""
        body = _encode_snapshot(snapshot)
        target = prior + 1
        require(snapshot.assignment_version == target, "save_if_version is monotonic +1 only")
        head = await self.head_version()
        if head == target:  # a retry after an ambiguous create may find its own object
            return _rotated_or_conflict(snapshot, await self.load_version(target))
        require(head == prior, f"save_if_version: head is {head}, not prior {prior}")
        resolution = await put_resolved(self._store, snapshot_path(target), body, CREATE)
        if _landed(resolution.state, snapshot_path(target)):
            return Rotated(snapshot)
        return _rotated_or_conflict(snapshot, await self.load_version(target))

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
            return _finalized(existing, proposal)
        resolution = await put_resolved(self._store, finalization_path(version), body, CREATE)
        if resolution.state is ReadBack.OURS:
            return Rotated(proposal)
        winner = await load_finalization(self._store, draining)
        if winner is None:
            raise WriteOutcomeUnknown(
                f"{finalization_path(version)}: create not settled", key=finalization_path(version)
            )
        return _finalized(winner, proposal)

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
            return Rotated(snapshot)
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
