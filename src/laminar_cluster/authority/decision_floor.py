"""The assignment-decision floor (LA §4.5.6): how far the decision chain may be compacted.

`prune_assignment_drain_decisions_before` advances the shared floor
`{before_target_version, terminal_anchor, terminal_anchor_link}`: the decisions below it become
eligible for the history prune and the greatest of them is kept by value as the anchor.

Ours (LA-19): the floor never passes the decision the active handoff pin is derived from. An
Abort whose predecessor has no committed cluster checkpoint takes its pin from the decision
below it (`handoff_pins`); a run of such Aborts (every rotation attempt failing before a Commit)
reaches back to the last decision with a checkpoint of its own. Compacting that decision away
would leave no pin and no Commit under the head's fence, and every recovery from that head
would be refused for good (RB-14). So the floor stops at that decision's version + 1, where it
is the anchor, and moves on once a Commit consumes the pin or a newer decision carries one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laminar_cluster.authority import admission
from laminar_cluster.authority.assignment_chain import AuditedDecision, audit_assignment_decisions
from laminar_cluster.authority.handoff_pins import handoff_pin_base_version
from laminar_cluster.authority.outcome_audit import cached_audit
from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AuthorityAssignmentDecision,
    AuthorityAssignmentDecisionFloor,
    LeaderAuthorityRecord,
)
from laminar_cluster.lease.validate import validate_assignment_floor

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

__all__ = ["prune_assignment_drain_decisions_before"]


async def prune_assignment_drain_decisions_before(
    authority: LeaderLeaseStore, proof: LeaderProof, before: int, *, deadline: float
) -> int:
    """Advance the shared decision floor towards `before` (LA §4.5.6) and return the durable
    floor: `before`, or less while the active handoff pin is derived from an older decision
    (module docstring).

    Precondition (the caller's duty): assignment snapshots below `before` are already durably
    pruned. `before == 0` only reads the current floor (0 without one). A floor already at or
    past the bound is returned without a write. Records below the new floor become eligible for
    the history prune; the anchor keeps continuity by value.
    """
    if before < 0 or before > U64_MAX:
        raise InvalidArgument(f"assignment decision floor {before} is outside 0..={U64_MAX}")
    if before == 0:
        head_record = await authority.load_record()
        floor = None if head_record is None else head_record.assignment_decision_floor
        return 0 if floor is None else floor.before_target_version
    what = "assignment decision floor"
    admission.require_canonical_proof(proof, what)

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> admission.Decision[int]:
        if not require_term.raced:
            require_term()  # LA §4.5.6 step 1: a fresh head is checked first (LA-5)
        reached = head.assignment_decision_floor
        reached_version = 0 if reached is None else reached.before_target_version
        # A floor at or past `before` settles the call, also when it is a winner's (LA §4.5.6).
        if reached_version >= before:
            authority.schedule_prune()  # floors only move forward: a history prune instead
            return admission.Answer(reached_version)
        require_term()  # LA-5: admitted only right after a record of the proof's exact term
        bounded = min(before, await _pin_bound(authority, head))
        if bounded <= reached_version:
            authority.schedule_prune()
            return admission.Answer(reached_version)
        audited = await audit_assignment_decisions(authority, head)
        return admission.Append(_floor_record(head, audited, bounded), bounded, bounded)

    return await admission.admit(
        authority, proof=proof, decide=decide, what=what, deadline=deadline
    )


async def _pin_bound(authority: LeaderLeaseStore, head: LeaderAuthorityRecord) -> int:
    """The highest floor that keeps the active pin's decision live or the anchor (LA-19),
    read from the head the append is conditioned on; U64_MAX without an active pin."""
    has_outcomes = head.outcome_head is not None or head.outcome_floor is not None
    outcomes = (await cached_audit(authority, head)).outcomes if has_outcomes else ()
    base = await handoff_pin_base_version(authority, head, outcomes)
    return U64_MAX if base is None else base + 1


def _floor_record(
    head_record: LeaderAuthorityRecord, audited: list[AuditedDecision], before: int
) -> LeaderAuthorityRecord:
    """The floor-advancing record after `head_record`: the anchor is the greatest live decision
    below `before` (with its exact audited link), else the existing anchor (LA §4.5.6 step 3)."""
    below = [entry for entry in audited if entry[1].target_version < before]
    anchor: AuthorityAssignmentDecision | None = None
    anchor_link: AssignmentDecisionLink | None = None
    if below:
        anchor_link, anchor = below[-1]
    elif head_record.assignment_decision_floor is not None:
        anchor = head_record.assignment_decision_floor.terminal_anchor
        anchor_link = head_record.assignment_decision_floor.terminal_anchor_link
    floor = AuthorityAssignmentDecisionFloor(
        before_target_version=before, terminal_anchor=anchor, terminal_anchor_link=anchor_link
    )
    with writing("assignment decision floor"):
        validate_assignment_floor(floor)  # validated before it is written (and again on encode)
    return admission.successor(head_record, assignment_decision_floor=floor)
