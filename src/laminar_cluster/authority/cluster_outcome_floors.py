"""Cluster outcome retention: floors, the recovery-cut preflight and automatic compaction
(LA §4.4.5 to LA §4.4.8; invariants LA-14, LA-21).

* `build_floor` (LA §4.4.7): anchors copied by value with their exact links (LA-14).
* `preflight_recovery_cut` (LA §4.4.4 step 2): the greatest live Commit at or above the artifact
  floor must have a valid capsule and pass the caller's artifact check (LA-14).
* `compaction` (LA §4.4.6): at 64 live terminal links, the record that moves the terminal floor to
  keep the newest 16; the artifact floor never moves here (LA-14).
* `prune_cluster_outcomes_before` (LA §4.4.5): advance the artifact floor under a leader proof,
  only with a live recovery cut above it and a passed preflight (LA-14), and never above the
  active assignment handoff pin's checkpoint (RB §2.9: the pinned checkpoint is
  protected from garbage collection). Deletion happens later,
  in the history prune and the capsule sweep, never inline.

Errors: no head or a proof not naming the head's term -> Fenced (LA-5); a refused request (no
live cut would remain, failed preflight) -> Refused; inconsistent durable state ->
CorruptRecord. The floor is admitted by `admission.admit`: bounded by
AUTHORITY_MUTATION_ATTEMPTS_MAX (then Contended) and the caller's absolute monotonic `deadline`
(DeadlineExceeded).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from laminar_cluster.authority import admission
from laminar_cluster.authority.handoff_pins import handoff_pin_at
from laminar_cluster.authority.outcome_audit import (
    AuditKey,
    OutcomeSnapshot,
    audit_cache,
    audit_key,
    cached_audit,
)
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import CorruptRecord, InvalidArgument, Refused
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.limits import (
    OUTCOME_HISTORY_COMPACTION_TRIGGER,
    OUTCOME_HISTORY_RETAINED_LINKS,
)
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import AuthorityOutcomeFloor, LeaderAuthorityRecord, OutcomeLink
from laminar_cluster.lease.validate import validate_outcome_floor

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

_PRUNE: Final = "cluster outcome floor advance"

ValidateArtifacts = Callable[[CheckpointOutcome], Awaitable[None]]
"""The caller's artifact preflight of a recovery cut: returns, or raises to refuse."""


def same_outcome_state(first: LeaderAuthorityRecord, second: LeaderAuthorityRecord) -> bool:
    """Renewals and seals are harmless to an outcome decision; new outcomes or floors are not."""
    return audit_key(first) == audit_key(second)


def retained_by_floor(floor: AuthorityOutcomeFloor, snapshot: OutcomeSnapshot) -> OutcomeSnapshot:
    """What an audit of a head carrying `floor` finds, derived from its predecessor's audit:
    the anchors, terminal outcomes at or above the terminal floor, Commits at or above the
    artifact floor, and the links still live."""
    terminal_before, artifact_before = floor.authority_before_epoch, floor.artifact_before_epoch
    retained = [a for a in (floor.committed_anchor, floor.terminal_anchor) if a is not None]
    retained.extend(
        o
        for o in snapshot.outcomes
        if o.epoch >= terminal_before or (o.is_commit() and o.epoch >= artifact_before)
    )
    by_epoch = {outcome.epoch: outcome for outcome in retained}
    return OutcomeSnapshot(
        outcomes=tuple(by_epoch[epoch] for epoch in sorted(by_epoch)),
        terminal_links=tuple(k for k in snapshot.terminal_links if k.epoch >= terminal_before),
        commit_links=tuple(k for k in snapshot.commit_links if k.epoch >= artifact_before),
    )


def _anchor_link(
    anchor: CheckpointOutcome | None,
    existing: tuple[CheckpointOutcome | None, OutcomeLink | None],
    links: tuple[OutcomeLink, ...],
    what: str,
    current: LeaderAuthorityRecord,
) -> OutcomeLink | None:
    """The exact link of a new anchor: the existing floor's, or an audited live link."""
    if anchor is None:
        return None
    if existing[0] == anchor:
        return existing[1]
    for link in links:
        if link.epoch == anchor.epoch and link.checkpoint_id == anchor.checkpoint_id:
            return link
    key = record_path(current.lease.seq)
    raise CorruptRecord(
        f"{key}: cluster {what} epoch {anchor.epoch} checkpoint {anchor.checkpoint_id} has no "
        "audited authority link",
        key=key,
    )


async def build_floor(
    authority: LeaderLeaseStore,
    current: LeaderAuthorityRecord,
    snapshot: OutcomeSnapshot,
    *,
    artifact_before: int,
    authority_before: int,
) -> AuthorityOutcomeFloor:
    """LA §4.4.7: anchors are the greatest audited outcome below the terminal floor and the
    greatest audited Commit below the artifact floor, copied by value (LA-14)."""
    existing = current.outcome_floor
    below = [o for o in snapshot.outcomes if o.epoch < authority_before]
    terminal_anchor = below[-1] if below else None
    commits = [o for o in snapshot.outcomes if o.epoch < artifact_before and o.is_commit()]
    committed_anchor = commits[-1] if commits else None
    terminal_link = _anchor_link(
        terminal_anchor,
        (None, None)
        if existing is None
        else (existing.terminal_anchor, existing.terminal_anchor_link),
        snapshot.terminal_links,
        "outcome",
        current,
    )
    committed_link = _anchor_link(
        committed_anchor,
        (None, None)
        if existing is None
        else (existing.committed_anchor, existing.committed_anchor_link),
        snapshot.commit_links,
        "Commit",
        current,
    )
    floor = AuthorityOutcomeFloor(
        deployment_id=await authority.require_decisions().load_or_create_deployment_id(),
        artifact_before_epoch=artifact_before,
        authority_before_epoch=authority_before,
        terminal_anchor=terminal_anchor,
        terminal_anchor_link=terminal_link,
        committed_anchor=committed_anchor,
        committed_anchor_link=committed_link,
    )
    with writing("cluster outcome floor"):
        validate_outcome_floor(floor)
    return floor


async def preflight_recovery_cut(
    authority: LeaderLeaseStore,
    floor: AuthorityOutcomeFloor,
    outcomes: tuple[CheckpointOutcome, ...],
    validate_artifacts: ValidateArtifacts,
) -> CheckpointOutcome | None:
    """LA §4.4.4 step 2 (LA-14): the recovery cut of `floor` (None while the artifact floor is 0)
    has a valid capsule and passes the caller's artifact check; Refused otherwise."""
    if floor.artifact_before_epoch == 0:
        return None
    live = [o for o in outcomes if o.epoch >= floor.artifact_before_epoch and o.is_commit()]
    if not live:
        raise CorruptRecord(
            f"cluster outcome floor {floor.artifact_before_epoch} has no live commit recovery cut"
        )
    cut = live[-1]
    refused = (
        f"cluster recovery cut epoch {cut.epoch} checkpoint {cut.checkpoint_id} failed durable "
        "recovery metadata preflight"
    )
    try:
        await authority.require_decisions().validate_recovery_capsule_for_outcome(cut)
    except (CorruptRecord, InvalidArgument) as error:
        raise Refused(f"{refused}: {error}") from error
    try:
        await validate_artifacts(cut)
    except Exception as error:  # the caller's check refuses by raising; never CancelledError
        raise Refused(f"{refused}: {error}") from error
    return cut


async def compaction(
    authority: LeaderLeaseStore, current: LeaderAuthorityRecord, snapshot: OutcomeSnapshot
) -> admission.Append[Any] | None:
    """LA §4.4.6: the compaction floor record to append before an outcome at 64 live terminal
    links (keeping the newest 16), else None. Once it lands the outcome is decided again on the
    new head (AGAIN). LA-21: the terminal chain stays short; LA-14: the artifact floor never moves
    here."""
    links = snapshot.terminal_links
    if len(links) < OUTCOME_HISTORY_COMPACTION_TRIGGER:
        return None
    existing = current.outcome_floor
    floor = await build_floor(
        authority,
        current,
        snapshot,
        artifact_before=0 if existing is None else existing.artifact_before_epoch,
        authority_before=links[len(links) - OUTCOME_HISTORY_RETAINED_LINKS].epoch,
    )
    candidate = admission.successor(current, outcome_floor=floor)
    return admission.Append(
        candidate, admission.AGAIN, admission.AGAIN, _install(authority, candidate, floor, snapshot)
    )


def _install(
    authority: LeaderLeaseStore,
    record: LeaderAuthorityRecord,
    floor: AuthorityOutcomeFloor,
    snapshot: OutcomeSnapshot,
) -> Callable[[], None]:
    """Once a floor record is durable, its audit is derived from its predecessor's."""
    return lambda: audit_cache(authority).install(
        audit_key(record), record.lease.seq, retained_by_floor(floor, snapshot)
    )


async def prune_cluster_outcomes_before(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    before_epoch: int,
    validate_artifacts: ValidateArtifacts,
    *,
    deadline: float,
) -> int:
    """LA §4.4.5: advance the artifact floor to `before_epoch` under `proof`; the floor now in
    force. A live Commit at or above it must remain, with a passed preflight (LA-14)."""
    if before_epoch == 0:
        head = await authority.load_record()
        floor = None if head is None else head.outcome_floor
        return 0 if floor is None else floor.artifact_before_epoch
    admission.require_canonical_proof(proof, _PRUNE)
    # The floor built and preflighted for one outcome state (audit key): a renewal or a seal
    # that wins the next sequence during the preflight is harmless and needs no second one.
    prepared: dict[AuditKey, AuthorityOutcomeFloor] = {}

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> admission.Decision[int]:
        require_term()  # LA §4.4.5 step 1: the term first, on every head (LA-5)
        existing = head.outcome_floor
        if existing is not None and existing.artifact_before_epoch >= before_epoch:
            authority.schedule_prune()  # covered: no preflight is repeated
            return admission.Answer(existing.artifact_before_epoch)
        snapshot = await cached_audit(authority, head)
        key = audit_key(head)
        if key not in prepared:
            floor = await _prepared_floor(
                authority, head, snapshot, before_epoch, validate_artifacts
            )
            prepared.clear()
            prepared[key] = floor
        floor = prepared[key]
        # RB §2.9: the pinned checkpoint stays live (above the artifact floor),
        # derived from the head the append is conditioned on.
        pin = await handoff_pin_at(authority, head, snapshot.outcomes)
        if pin is not None and pin.checkpoint is not None and pin.checkpoint.epoch < before_epoch:
            raise Refused(
                f"cannot advance cluster outcome floor to {before_epoch}: the assignment handoff "
                f"pin of assignment version {pin.target.assignment_version} holds checkpoint "
                f"epoch {pin.checkpoint.epoch}"
            )
        candidate = admission.successor(head, outcome_floor=floor)
        # An identical floor record already durable: the next head answers as covered.
        return admission.Append(
            candidate,
            before_epoch,
            admission.AGAIN,
            _install(authority, candidate, floor, snapshot),
        )

    return await admission.admit(
        authority, proof=proof, decide=decide, what=_PRUNE, deadline=deadline
    )


async def _prepared_floor(
    authority: LeaderLeaseStore,
    current: LeaderAuthorityRecord,
    snapshot: OutcomeSnapshot,
    before_epoch: int,
    validate_artifacts: ValidateArtifacts,
) -> AuthorityOutcomeFloor:
    """LA §4.4.5 steps 3-6: the new floor, once a live recovery cut above it passed its
    preflight (LA-14); Refused otherwise."""
    if not any(o.epoch >= before_epoch and o.is_commit() for o in snapshot.outcomes):
        # LA-14: a live recovery cut must always remain above the artifact floor.
        raise Refused(
            f"cannot advance cluster outcome floor to {before_epoch}: no live commit recovery "
            "cut would remain"
        )
    existing = current.outcome_floor
    authority_before = (
        before_epoch if existing is None else max(existing.authority_before_epoch, before_epoch)
    )
    floor = await build_floor(
        authority,
        current,
        snapshot,
        artifact_before=before_epoch,
        authority_before=authority_before,
    )
    await preflight_recovery_cut(authority, floor, snapshot.outcomes, validate_artifacts)
    return floor
