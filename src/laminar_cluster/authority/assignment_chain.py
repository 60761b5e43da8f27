"""The assignment-decision chain: its audit and its retention floor (LA §3.6, LA §4.5.5, LA §4.5.6;
invariants LA-5, LA-15, LA-11, LA-21), the pure chain rules of LA §4.5.1 steps 2, 5 and 7 (floor,
advancing version, the admitting record), and the helpers the decision appends share
(`assignment_decisions` holds the operations).

Drain and recovery decisions live on one backward-linked chain through authority records:
`assignment_decision_head` names the latest admitting record, whose
`previous_assignment_decision` names the one before. Target versions strictly increase along it
(LA-15). The floor `{before_target_version, terminal_anchor, terminal_anchor_link}` compacts
everything below `before`; the anchor (the greatest decision below it) is kept by value, so the
records below the floor may be deleted by the history prune. `audit_assignment_decisions`
reads the whole live chain; `live_decisions_newest_first` walks it lazily for readers that need
only the newest decisions (the handoff pin, `handoff_pins`), with the same checks.

Errors: a broken chain (a link that its record does not carry, a record without a decision, a
walk that misses the floor's anchor, regressing versions) is durable corruption: CorruptRecord
naming the record (spec `Decision::Conflict`; LA §7 maps the same problems to `Invalid` in the
prune, so one kind serves both). A record that vanished mid-walk is InventoryChanged; a live
chain longer than MAX_LIVE_AUTHORITY_LINKS is Refused (advance the floor first, LA-21).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from laminar_cluster.authority import admission
from laminar_cluster.errors import CorruptRecord, InventoryChanged, Refused
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.log import read_record_from
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AuthorityAssignmentDecision,
    LeaderAuthorityRecord,
)

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore


AuditedDecision = tuple[AssignmentDecisionLink, AuthorityAssignmentDecision]


async def audit_assignment_decisions(
    authority: LeaderLeaseStore, head_record: LeaderAuthorityRecord
) -> list[AuditedDecision]:
    """The live decisions of `head_record`'s chain with their exact links, ascending by target
    version (LA §4.5.5). The floor's anchor is not in the list (it is kept by value on the floor);
    every listed record is one the history prune must keep.

    Reads each live decision record once (the head itself is reused), at most
    MAX_LIVE_AUTHORITY_LINKS of them (LA-21).
    """
    newest_first = [entry async for entry in live_decisions_newest_first(authority, head_record)]
    newest_first.reverse()
    return newest_first


async def live_decisions_newest_first(
    authority: LeaderLeaseStore, head_record: LeaderAuthorityRecord
) -> AsyncGenerator[AuditedDecision, None]:
    """The live decisions of `head_record`'s chain, newest first, read lazily: a caller that
    needs only the newest few stops early and reads only those records (close the iterator with
    `contextlib.aclosing`). The floor's anchor is not yielded (it is on the floor by value).

    Each decision is checked against the record that admitted it and must be strictly below the
    one yielded before it (LA-15); the walk must leave the live chain exactly at the floor's
    anchor (LA-11) and stays within MAX_LIVE_AUTHORITY_LINKS reads (LA-21). Errors as in
    `audit_assignment_decisions`, raised when the walk reaches them.
    """
    floor = head_record.assignment_decision_floor
    before = 0 if floor is None else floor.before_target_version
    anchor_link = None if floor is None else floor.terminal_anchor_link
    head_key = record_path(head_record.lease.seq)
    newer: AuditedDecision | None = None
    stopped_at_anchor = False
    link = head_record.assignment_decision_head
    # LA-21: at most MAX_LIVE_AUTHORITY_LINKS record reads, then (at most) the anchor stop.
    for read in range(MAX_LIVE_AUTHORITY_LINKS + 1):
        if link is None:
            break
        if link.target_version < before:
            # LA-11: the walk leaves the live chain exactly at the floor's anchor, or not at all.
            if link != anchor_link:
                raise CorruptRecord(
                    f"{head_key}: assignment decision chain does not meet durable floor "
                    f"{before} at its terminal anchor (link {link.sequence}, target "
                    f"{link.target_version})",
                    key=head_key,
                )
            stopped_at_anchor = True
            break
        if read == MAX_LIVE_AUTHORITY_LINKS:
            raise Refused(  # the floor must advance before this chain can be audited
                f"live assignment-decision retention exceeds the fixed "
                f"{MAX_LIVE_AUTHORITY_LINKS}-link authority bound"
            )
        decision, previous = await _audited_link(authority, head_record, link)
        if newer is not None and decision.target_version >= newer[1].target_version:
            key = record_path(newer[0].sequence)  # LA-15: versions strictly increase
            raise CorruptRecord(
                f"{key}: assignment decisions regress from version {decision.target_version} to "
                f"{newer[1].target_version}",
                key=key,
            )
        newer = (link, decision)
        yield newer
        link = previous
    if anchor_link is not None and not stopped_at_anchor:
        raise CorruptRecord(
            f"{head_key}: assignment decision chain stopped without its durable retention anchor",
            key=head_key,
        )


async def _audited_link(
    authority: LeaderLeaseStore, head_record: LeaderAuthorityRecord, link: AssignmentDecisionLink
) -> tuple[AuthorityAssignmentDecision, AssignmentDecisionLink | None]:
    """The decision at `link`, checked against the record that admitted it, with that record's
    back link (validated to be strictly older)."""
    key = record_path(link.sequence)
    record = await read_record_from(authority.store, head_record, link.sequence)
    if record is None:
        raise InventoryChanged(
            f"{key}: assignment decision authority record {link.sequence} disappeared during audit"
        )
    decision = record.assignment_decision
    if decision is None:
        raise CorruptRecord(
            f"{key}: assignment decision head version {link.target_version} points to "
            f"non-decision authority record {link.sequence}",
            key=key,
        )
    if record.assignment_decision_head != link or decision.target_version != link.target_version:
        raise CorruptRecord(
            f"{key}: assignment decision link version {link.target_version} sequence "
            f"{link.sequence} does not match its authority record",
            key=key,
        )
    return decision, record.previous_assignment_decision


def check_decision_floor(head_record: LeaderAuthorityRecord, target_version: int) -> None:
    """A decision below the floor was compacted away: it can be neither recorded nor read."""
    floor = head_record.assignment_decision_floor
    if floor is not None and target_version < floor.before_target_version:
        raise Refused(
            f"assignment decision version {target_version} is below durable retention floor "
            f"{floor.before_target_version}"
        )


def check_advances(audited: list[AuditedDecision], target_version: int) -> None:
    """A new decision's version must exceed every live one (LA §4.5.1 step 5), and the live chain
    must have room for it: a chain longer than its audit bound could never be audited again,
    not even by the floor advance that would shorten it (LA-21; as LA §4.4.1 step 5 for Commits)."""
    if audited and target_version <= audited[-1][1].target_version:  # LA-15: strictly increasing
        raise Refused(
            f"assignment decision version {target_version} does not advance durable version "
            f"{audited[-1][1].target_version}"
        )
    if len(audited) >= MAX_LIVE_AUTHORITY_LINKS:  # LA-21: nothing is written
        raise Refused(
            f"assignment decision chain holds {len(audited)} live decisions, the fixed "
            f"{MAX_LIVE_AUTHORITY_LINKS}-link authority bound: advance the assignment decision "
            "floor first"
        )


def decision_record(
    head_record: LeaderAuthorityRecord, decision: AuthorityAssignmentDecision
) -> LeaderAuthorityRecord:
    """The decision append after `head_record` admitting `decision`, linked after the old chain
    head (LA §4.5.1 step 7)."""
    return admission.successor(
        head_record,
        assignment_decision=decision,
        previous_assignment_decision=head_record.assignment_decision_head,
        assignment_decision_head=AssignmentDecisionLink(
            sequence=head_record.lease.seq + 1, target_version=decision.target_version
        ),
    )
