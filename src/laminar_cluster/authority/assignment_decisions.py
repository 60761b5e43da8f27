"""Assignment decisions through the leader authority log (LA §3.6, LA §4.5;
invariants LA-5, LA-15).

A drain decision settles a transition predecessor -> target opened by a leader term: `Commit`
only by that exact term, `Abort` by any canonical term (LA-15). A recovery decision authorises
installing a staged successor assignment after process failures, only if it matches the live
predecessor snapshot and the staged proposal (LA-15). Both kinds share one chain keyed by target
version: one decision per version across both kinds, versions strictly increasing (LA-15). A
decision is admitted by appending record seq+1 under the exact term its proof names, so the
proof check and the admission are one create-only store operation (LA-5).

* `record_assignment_drain_decision` / `record_assignment_recovery_decision` (LA §4.5.1 to
  LA §4.5.3): `DecisionCreated | DecisionUnchanged | DecisionConflict(winner)`; a winner of the
  other kind at the same version is a Refused error.
* `new_drain_decision` / `new_recovery_decision`: the validating constructors (a drain Commit
  carries its handoff checkpoint, a recovery its recovery checkpoint: RB §2.5, RB §2.6).
* `assignment_drain_decision` / `assignment_recovery_decision` / `materialize_assignment_recovery`
  (LA §4.5.4); `audit_assignment_decisions` (LA §4.5.5) and
  `prune_assignment_drain_decisions_before` (LA §4.5.6) live in `assignment_chain` and are
  re-exported here.

Errors (spec -> here): `Io` -> StoreUnavailable; an invalid decision or a decision that does not
match the snapshots -> InvalidArgument; `Fenced` -> Fenced; `Decision::Conflict` (below the floor,
non-advancing, cross-kind) -> Refused; corrupt durable state -> CorruptRecord. Decisions are
admitted by `admission.admit`: an absolute monotonic `deadline` and at most
AUTHORITY_MUTATION_ATTEMPTS_MAX attempts (then Contended).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from laminar_cluster.authority import admission
from laminar_cluster.authority.assignment_chain import (
    AuditedDecision,
    audit_assignment_decisions,
    check_advances,
    check_decision_floor,
    decision_record,
)
from laminar_cluster.authority.decision_floor import prune_assignment_drain_decisions_before
from laminar_cluster.authority.reread import read_head_retrying
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import (
    Contended,
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    LaminarError,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof, proof_is_canonical
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    AuthorityAssignmentDecision,
    LeaderAuthorityRecord,
    ProcessLeaseFence,
)
from laminar_cluster.lease.validate import (
    validate_assignment_decision,
    validate_drain_decision,
    validate_recovery_decision,
)

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

__all__ = [
    "AssignmentSnapshotSource",
    "AuditedDecision",
    "DecisionConflict",
    "DecisionCreated",
    "DecisionUnchanged",
    "RecordDrainDecisionResult",
    "RecordRecoveryDecisionResult",
    "assignment_drain_decision",
    "assignment_recovery_decision",
    "audit_assignment_decisions",
    "materialize_assignment_recovery",
    "new_drain_decision",
    "new_recovery_decision",
    "prune_assignment_drain_decisions_before",
    "record_assignment_drain_decision",
    "record_assignment_recovery_decision",
]

T = TypeVar("T")
D = TypeVar("D", AssignmentDrainDecision, AssignmentRecoveryDecision)


class AssignmentSnapshotSource(Protocol):
    """What the recovery preflight (LA §4.5.1 step 6) and `materialize_assignment_recovery`
    (LA §4.5.4) need from the assignment snapshot store (LA §8.6), which lives in a higher layer.

    Errors: StoreUnavailable for I/O (mapped to spec `Io`), CorruptRecord for bad durable
    snapshots, any other LaminarError for a missing or unusable object (mapped to `Invalid`).
    """

    async def load_current(self) -> tuple[CheckpointAssignmentFence, bool] | None:
        """The current durable assignment's fence and whether it is draining, or None."""
        ...

    async def load_recovery_proposal(self, ref: AssignmentSnapshotRef) -> CheckpointAssignmentFence:
        """The fence of the staged recovery proposal `ref` (content-verified by the store)."""
        ...

    async def materialize_recovery(self, ref: AssignmentSnapshotRef) -> object:
        """Install proposal `ref` as the next assignment; its rotate outcome (opaque here)."""
        ...


@dataclass(frozen=True, slots=True)
class DecisionCreated(Generic[D]):
    """This call admitted `decision`."""

    decision: D


@dataclass(frozen=True, slots=True)
class DecisionUnchanged(Generic[D]):
    """An identical decision was already durable (a retry, or an ambiguous create that applied:
    reported as Unchanged, never as Created)."""

    decision: D


@dataclass(frozen=True, slots=True)
class DecisionConflict(Generic[D]):
    """A different decision of the same kind settled this target version; obey `winner`."""

    winner: D


RecordDrainDecisionResult = (
    DecisionCreated[AssignmentDrainDecision]
    | DecisionUnchanged[AssignmentDrainDecision]
    | DecisionConflict[AssignmentDrainDecision]
)
RecordRecoveryDecisionResult = (
    DecisionCreated[AssignmentRecoveryDecision]
    | DecisionUnchanged[AssignmentRecoveryDecision]
    | DecisionConflict[AssignmentRecoveryDecision]
)
_Result = DecisionCreated[D] | DecisionUnchanged[D] | DecisionConflict[D]


def new_drain_decision(
    transition: AssignmentDrainTransition,
    leader_proof: LeaderProof,
    verdict: AssignmentVerdict,
    handoff_checkpoint: RecoveryCapsuleRef | None = None,
) -> AssignmentDrainDecision:
    """The public constructor (LA §3.12, RB §2.5): a canonical transition and proof, a
    Commit only by the term that opened the transition (LA-15), and a canonical handoff checkpoint
    iff the verdict is Commit (`commit(transition, proof, handoff)` / `abort(transition,
    proof)`). InvalidArgument otherwise."""
    decision = AssignmentDrainDecision(
        transition=transition,
        leader_proof=leader_proof,
        verdict=verdict,
        handoff_checkpoint=handoff_checkpoint,
    )
    with writing("assignment drain decision"):
        validate_drain_decision(decision)
    return decision


def new_recovery_decision(
    predecessor: CheckpointAssignmentFence,
    target: CheckpointAssignmentFence,
    proposal: AssignmentSnapshotRef,
    removed_process_fences: Sequence[ProcessLeaseFence],
    recovery_checkpoint: RecoveryCapsuleRef | None,
    leader_proof: LeaderProof,
) -> AssignmentRecoveryDecision:
    """The public constructor of a recovery decision (LA §3.6, RB §2.6): a canonical
    successor, its staged proposal, exactly one process fence per removed predecessor process
    (in predecessor order) and a canonical recovery checkpoint, or None for the initial state
    (LA-20: admitted only while no cluster checkpoint ever committed). InvalidArgument
    otherwise."""
    decision = AssignmentRecoveryDecision(
        predecessor=predecessor,
        target=target,
        proposal=proposal,
        removed_process_fences=tuple(removed_process_fences),
        recovery_checkpoint=recovery_checkpoint,
        leader_proof=leader_proof,
    )
    with writing("assignment recovery decision"):
        validate_recovery_decision(decision)
    return decision


async def record_assignment_drain_decision(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    decision: AssignmentDrainDecision,
    *,
    deadline: float,
) -> RecordDrainDecisionResult:
    """Admit a drain settlement at its target version (LA §4.5.2)."""
    return await _record(
        authority, proof, decision, AssignmentDrainDecision, None, deadline=deadline
    )


async def record_assignment_recovery_decision(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    decision: AssignmentRecoveryDecision,
    snapshots: AssignmentSnapshotSource,
    *,
    deadline: float,
) -> RecordRecoveryDecisionResult:
    """Admit a failure-recovery assignment at its target version (LA §4.5.3), after checking it
    against the live predecessor snapshot and the staged proposal (LA-15).

    The spec's pre-check (load head, proof, floor, same-version winner) is exactly the first
    iteration of the shared loop, which runs it before any snapshot I/O, so it is not repeated.
    """
    return await _record(
        authority, proof, decision, AssignmentRecoveryDecision, snapshots, deadline=deadline
    )


async def _record(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    decision: D,
    kind: type[D],
    snapshots: AssignmentSnapshotSource | None,
    *,
    deadline: float,
) -> _Result[D]:
    """The shared core (LA §4.5.1): validate, then admit (audit, settle, preflight, append) until
    the decision is settled, Fenced, Refused, or the deadline or the attempt bound passes."""
    with writing(f"assignment {_kind_name(kind)} decision"):
        validate_assignment_decision(decision)
    # LA-5: the decision carries the proof it is admitted under; only a canonical proof admits.
    if decision.leader_proof != proof or not proof_is_canonical(proof):
        raise Fenced(
            "assignment decision leader proof is not the canonical proof it is recorded under"
        )
    target = decision.target_version
    created: _Result[D] = DecisionCreated(decision)
    identical: _Result[D] = DecisionUnchanged(decision)

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> admission.Decision[_Result[D]]:
        if not require_term.raced:
            require_term()  # LA §4.5.1 step 2.1: a fresh head is checked first (LA-5)
        # A race winner may hold our own decision: answer from it first (LA §11.1).
        audited = await audit_assignment_decisions(authority, head)
        settled = _settled(decision, kind, audited)
        if settled is not None:
            return admission.Answer(settled)
        require_term()  # LA-5: admitted only right after a record of the proof's exact term
        check_decision_floor(head, target)
        check_advances(audited, target)
        if isinstance(decision, AssignmentRecoveryDecision):
            assert snapshots is not None  # the recovery entry point always passes them
            _check_initial_state(head, decision)
            await _check_recovery_snapshots(snapshots, decision)
        return admission.Append(decision_record(head, decision), created, identical)

    what = f"assignment {_kind_name(kind)} decision for target version {target}"
    return await admission.admit(
        authority, proof=proof, decide=decide, what=what, deadline=deadline
    )


def _kind_name(kind: type[AuthorityAssignmentDecision]) -> str:
    return "drain" if kind is AssignmentDrainDecision else "recovery"


def _settled(decision: D, kind: type[D], audited: list[AuditedDecision]) -> _Result[D] | None:
    """The answer when `audited` already settles the decision's target version (LA-15: one
    decision per version across both kinds), else None."""
    target = decision.target_version
    for _, winner in audited:
        if winner.target_version != target:
            continue
        if winner == decision:
            return DecisionUnchanged(decision)
        if isinstance(winner, kind):
            return DecisionConflict(winner)
        raise Refused(  # LA-15: the other kind owns this version
            f"assignment {_kind_name(type(winner))} decision already settled target version "
            f"{target}"
        )
    return None


def _check_initial_state(head: LeaderAuthorityRecord, decision: AssignmentRecoveryDecision) -> None:
    """LA-20: a recovery to the initial state (no recovery checkpoint) is admitted only by a
    head under which no cluster checkpoint ever committed (no Commit chain, no compacted
    Commit anchor). The append is conditioned on this very head, so no Commit can slip in
    between; after admission the decision's pin refuses every Commit outside its target."""
    if decision.recovery_checkpoint is not None:
        return
    floor = head.outcome_floor
    if head.commit_head is not None or (floor is not None and floor.committed_anchor is not None):
        committed = head.commit_head.epoch if head.commit_head is not None else "compacted"
        raise Contended(
            f"assignment recovery decision for target version {decision.target_version}: a "
            f"cluster checkpoint has committed (epoch {committed}); recovery to the initial "
            "state is refused, re-derive the recovery checkpoint"
        )


async def _check_recovery_snapshots(
    snapshots: AssignmentSnapshotSource, decision: AssignmentRecoveryDecision
) -> None:
    """LA §4.5.1 step 6 (LA-15): the live snapshot is the decision's predecessor and is not
    draining; the staged proposal is the decision's target."""
    current = await _snapshot_call("load assignment recovery predecessor", snapshots.load_current())
    if current is None:
        raise InvalidArgument("assignment recovery requires a durable predecessor snapshot")
    fence, draining = current
    if draining or fence != decision.predecessor:
        raise InvalidArgument(
            "assignment recovery predecessor is not the exact committed assignment head: the "
            f"live snapshot is version {fence.assignment_version}"
            f"{' (draining)' if draining else ''}, the decision names version "
            f"{decision.predecessor.assignment_version}"
        )
    proposal = await _snapshot_call(
        "load assignment recovery proposal", snapshots.load_recovery_proposal(decision.proposal)
    )
    if proposal != decision.target:
        raise InvalidArgument(
            "assignment recovery proposal does not match its authorized target fence "
            f"(proposal {decision.proposal.sha256}, version {decision.proposal.version})"
        )


async def _snapshot_call(context: str, call: Awaitable[T]) -> T:
    """Await a snapshot-store call, mapping its errors (LA §3.11): I/O stays
    StoreUnavailable, corruption stays CorruptRecord, anything else is InvalidArgument; each
    message is prefixed with `context`. DeadlineExceeded and WriteOutcomeUnknown pass through
    (they have their own caller actions)."""
    try:
        return await call
    except (DeadlineExceeded, WriteOutcomeUnknown):
        raise
    except StoreUnavailable as error:
        raise StoreUnavailable(f"{context}: {error}") from error
    except CorruptRecord as error:
        raise CorruptRecord(f"{context}: {error}", key=error.key) from error
    except LaminarError as error:
        raise InvalidArgument(f"{context}: {error}") from error


async def assignment_drain_decision(
    authority: LeaderLeaseStore, target_version: int
) -> AssignmentDrainDecision | None:
    """The drain decision of `target_version`, or None (LA §4.5.4). Refused below the floor or
    when a recovery decision settled that version."""
    return await _decision_at(authority, target_version, AssignmentDrainDecision)


async def assignment_recovery_decision(
    authority: LeaderLeaseStore, target_version: int
) -> AssignmentRecoveryDecision | None:
    """The recovery decision of `target_version`, or None (LA §4.5.4). Refused below the floor or
    when a drain decision settled that version."""
    return await _decision_at(authority, target_version, AssignmentRecoveryDecision)


async def materialize_assignment_recovery(
    authority: LeaderLeaseStore, target_version: int, snapshots: AssignmentSnapshotSource
) -> object:
    """Install the authority-admitted recovery proposal of `target_version` (LA §4.5.4, LA-15).

    The caller supplies only the version: an arbitrary staged proposal can never bypass the
    decision chain. The proposal's fence is re-checked against the admitted target.
    """
    decision = await assignment_recovery_decision(authority, target_version)
    if decision is None:
        raise Refused(f"assignment recovery target {target_version} has no authority decision")
    proposal = await _snapshot_call(
        "load authorized assignment recovery proposal",
        snapshots.load_recovery_proposal(decision.proposal),
    )
    if proposal != decision.target:  # LA-15: only the exact admitted proposal is installed
        raise CorruptRecord(
            "authorized assignment recovery proposal does not match its target (proposal "
            f"{decision.proposal.sha256}, version {decision.proposal.version})"
        )
    return await _snapshot_call(
        "materialize authorized assignment recovery",
        snapshots.materialize_recovery(decision.proposal),
    )


async def _decision_at(authority: LeaderLeaseStore, target_version: int, kind: type[D]) -> D | None:
    """The audited decision of `kind` at `target_version` of the published head, or None;
    Refused when the other kind settled that version (LA-15)."""
    if target_version <= 0:
        raise InvalidArgument(
            f"assignment decision target version must be nonzero, not {target_version}"
        )

    async def read(head: LeaderAuthorityRecord | None) -> AuthorityAssignmentDecision | None:
        if head is None:
            return None
        check_decision_floor(head, target_version)
        audited = await audit_assignment_decisions(authority, head)
        return next((d for _, d in audited if d.target_version == target_version), None)

    found = await read_head_retrying(authority, read)
    if found is None or isinstance(found, kind):
        return found
    raise Refused(
        f"target version {target_version} was settled by assignment {_kind_name(type(found))}"
    )
