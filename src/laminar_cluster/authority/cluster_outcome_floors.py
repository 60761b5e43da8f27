"""Cluster outcome retention: floors, the recovery-cut preflight and automatic compaction
(spec_leader_lease §4.4.5-§4.4.8; invariants S13, S14, S22), and the helpers every outcome
mutation shares (proof checks, the successor record, contention, the deadline bound).

* `build_floor` (§4.4.7): anchors copied by value with their exact links (S13).
* `preflight_recovery_cut` (§4.4.4 step 2): the greatest live Commit at or above the artifact
  floor must have a valid capsule and pass the caller's artifact check (S14).
* `compact_before_append` (§4.4.6): at 64 live terminal links, move the terminal floor to keep
  the newest 16; the artifact floor never moves here (S14).
* `prune_cluster_outcomes_before` (§4.4.5): advance the artifact floor under a leader proof,
  only with a live recovery cut above it and a passed preflight (S14), and never above the
  active assignment handoff pin's checkpoint (spec_rebalance §2.9: the pinned checkpoint is
  protected from garbage collection). Deletion happens later,
  in the history prune and the capsule sweep, never inline.

Errors: no head or a proof not naming the head's term -> Fenced (S5); a refused request (no
live cut would remain, failed preflight) -> Refused; inconsistent durable state ->
CorruptRecord. The spec's unbounded loops are bounded by AUTHORITY_MUTATION_ATTEMPTS_MAX and the
caller's absolute monotonic `deadline` (DeadlineExceeded).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import msgspec

from laminar_cluster.authority.handoff_pins import handoff_pin_at
from laminar_cluster.authority.outcome_audit import (
    OutcomeSnapshot,
    audit_cache,
    audit_key,
    cached_audit,
)
from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import (
    CorruptRecord,
    Fenced,
    InvalidArgument,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.fencing import LeaderProof, proof_is_canonical
from laminar_cluster.lease.limits import (
    AUTHORITY_MUTATION_ATTEMPTS_MAX,
    OUTCOME_HISTORY_COMPACTION_TRIGGER,
    OUTCOME_HISTORY_RETAINED_LINKS,
)
from laminar_cluster.lease.log import require_advanced
from laminar_cluster.lease.outcomes import AppendContended, AppendCreated
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import AuthorityOutcomeFloor, LeaderAuthorityRecord, OutcomeLink
from laminar_cluster.lease.validate import validate_outcome_floor
from laminar_cluster.lease.validate_chains import lease_matches_proof

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

_PRUNE: Final = "cluster outcome floor advance"

ValidateArtifacts = Callable[[CheckpointOutcome], Awaitable[None]]
"""The caller's artifact preflight of a recovery cut: returns, or raises to refuse."""


def not_converged(what: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"{what} did not converge in {AUTHORITY_MUTATION_ATTEMPTS_MAX} attempts"
    )


def require_term(head: LeaderAuthorityRecord | None, proof: LeaderProof) -> LeaderAuthorityRecord:
    """The head, if `proof` names its exact term (S5); Fenced otherwise."""
    if head is None:
        raise Fenced("cluster checkpoint decision found no durable leader authority head")
    if not lease_matches_proof(head.lease, proof):
        raise Fenced("cluster checkpoint decision was fenced by a different durable leader term")
    return head


def require_canonical_proof(proof: LeaderProof) -> None:
    if not proof_is_canonical(proof):
        raise Fenced("cluster checkpoint decision proof is not canonical")


def successor(head: LeaderAuthorityRecord) -> LeaderAuthorityRecord:
    """A decision append after `head`: seq+1; renewal, token, owner and expiry unchanged; carried
    fields copied, admitting fields cleared (§3.3, §3.4)."""
    if head.lease.seq >= U64_MAX:
        raise InvalidArgument("leader authority sequence exhausted")
    return head.preserve_with_lease(msgspec.structs.replace(head.lease, seq=head.lease.seq + 1))


def settle_contention(
    winner: LeaderAuthorityRecord, proof: LeaderProof, base_seq: int, what: str
) -> None:
    """A lost append is retried only when the winner is our own term and moved the log on."""
    if not lease_matches_proof(winner.lease, proof):
        raise Fenced(f"{what} was fenced by a different durable leader term")  # S5
    require_advanced(winner, base_seq, what)


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
    """§4.4.7: anchors are the greatest audited outcome below the terminal floor and the
    greatest audited Commit below the artifact floor, copied by value (S13)."""
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
    """§4.4.4 step 2 (S14): the recovery cut of `floor` (None while the artifact floor is 0)
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


async def compact_before_append(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    current: LeaderAuthorityRecord,
    snapshot: OutcomeSnapshot,
) -> bool:
    """§4.4.6: True if a compaction floor was appended, or the head changed (retry); False when
    fewer than 64 live terminal links need no compaction. S22: the terminal chain stays short;
    S14: the artifact floor is never moved here."""
    links = snapshot.terminal_links
    if len(links) < OUTCOME_HISTORY_COMPACTION_TRIGGER:
        return False
    existing = current.outcome_floor
    floor = await build_floor(
        authority,
        current,
        snapshot,
        artifact_before=0 if existing is None else existing.artifact_before_epoch,
        authority_before=links[len(links) - OUTCOME_HISTORY_RETAINED_LINKS].epoch,
    )
    # Building the floor read remotely: publish only over the exact audited outcome state.
    published = await authority.load_published_head()
    rechecked = require_term(None if published is None else published.record, proof)
    if not same_outcome_state(rechecked, current):
        return True
    candidate = msgspec.structs.replace(successor(rechecked), outcome_floor=floor)
    outcome = await authority.append(published, candidate)
    if isinstance(outcome, AppendContended):
        settle_contention(outcome.winner, proof, current.lease.seq, "outcome history compaction")
        return True
    audit_cache(authority).install(
        audit_key(candidate), candidate.lease.seq, retained_by_floor(floor, snapshot)
    )
    return True


async def prune_cluster_outcomes_before(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    before_epoch: int,
    validate_artifacts: ValidateArtifacts,
    *,
    deadline: float,
) -> int:
    """§4.4.5: advance the artifact floor to `before_epoch` under `proof`; the floor now in
    force. A live Commit at or above it must remain, with a passed preflight (S14)."""
    if before_epoch == 0:
        head = await authority.load_record()
        floor = None if head is None else head.outcome_floor
        return 0 if floor is None else floor.artifact_before_epoch
    require_canonical_proof(proof)
    async with within_deadline(authority.clock, deadline, _PRUNE):
        for attempt in range(AUTHORITY_MUTATION_ATTEMPTS_MAX):
            if attempt:
                await authority.clock.sleep(0)
            result = await _prune_attempt(authority, proof, before_epoch, validate_artifacts)
            if result is not None:
                return result
    raise not_converged(_PRUNE)


async def _prune_attempt(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    before_epoch: int,
    validate_artifacts: ValidateArtifacts,
) -> int | None:
    """One pass of §4.4.5's loop: the floor in force, or None to retry."""
    current = require_term(await authority.load_record(), proof)
    existing = current.outcome_floor
    if existing is not None and existing.artifact_before_epoch >= before_epoch:
        authority.schedule_prune()  # covered: no preflight is repeated
        return existing.artifact_before_epoch
    snapshot = await cached_audit(authority, current)
    if not any(o.epoch >= before_epoch and o.is_commit() for o in snapshot.outcomes):
        # S14: a live recovery cut must always remain above the artifact floor.
        raise Refused(
            f"cannot advance cluster outcome floor to {before_epoch}: no live commit recovery "
            "cut would remain"
        )
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
    # The preflight read remotely: renewals and seals since are harmless, outcomes and floors
    # are not.
    published = await authority.load_published_head()
    rechecked = require_term(None if published is None else published.record, proof)
    if not same_outcome_state(rechecked, current):
        return None
    # spec_rebalance §2.9: the pinned checkpoint stays live (above the artifact floor). Derived
    # from the head the append is conditioned on; the outcomes are unchanged since `current`.
    pin = await handoff_pin_at(authority, rechecked, snapshot.outcomes)
    if pin is not None and pin.checkpoint is not None and pin.checkpoint.epoch < before_epoch:
        raise Refused(
            f"cannot advance cluster outcome floor to {before_epoch}: the assignment handoff pin "
            f"of assignment version {pin.target.assignment_version} holds checkpoint epoch "
            f"{pin.checkpoint.epoch}"
        )
    candidate = msgspec.structs.replace(successor(rechecked), outcome_floor=floor)
    outcome = await authority.append(published, candidate)
    if isinstance(outcome, AppendContended):
        settle_contention(outcome.winner, proof, rechecked.lease.seq, _PRUNE)
        return None
    if isinstance(outcome, AppendCreated):
        audit_cache(authority).install(
            audit_key(candidate), candidate.lease.seq, retained_by_floor(floor, snapshot)
        )
        return before_epoch
    return await _confirm_identical_floor(
        authority, proof, candidate, before_epoch, validate_artifacts
    )


async def _confirm_identical_floor(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    candidate: LeaderAuthorityRecord,
    before_epoch: int,
    validate_artifacts: ValidateArtifacts,
) -> int | None:
    """An identical floor record was already durable: re-audit it, re-run the preflight, and
    confirm the head still carries it under our term; None to retry."""
    floor = candidate.outcome_floor
    assert floor is not None  # the caller built it with one
    snapshot = await cached_audit(authority, candidate)
    await preflight_recovery_cut(authority, floor, snapshot.outcomes, validate_artifacts)
    confirmed = require_term(await authority.load_record(), proof)
    return before_epoch if same_outcome_state(confirmed, candidate) else None
