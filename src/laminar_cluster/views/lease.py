"""The leader lease as a reader finds it, read-only: the published head (never repaired), its
record age, and the decisions of an audited log summarized for `lease` and `authority`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.lease.limits import DEFAULT_TTL_S, MAX_LEASE_HEAD_READ_ATTEMPTS
from laminar_cluster.lease.log import discover_head, read_pointer, read_record
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.lease.records import AssignmentDrainDecision, LeaderAuthorityRecord
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.authority_audit import AuthorityAudit, Problem, audit_authority
from laminar_cluster.views.members import member_row, read_member

DIAGNOSTIC: str = (
    "diagnostic only, by this machine's wall clock: a rival takes over after observing the "
    "lease unchanged for a full TTL on its own monotonic clock, never by this field"
)


@dataclass
class LeaseView:
    store: str
    pointer_sequence: int | None = None
    head: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


DOWN = ("dead", "left")


def leader_liveness(leader: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the head's leader is live, by the views' rule: its head record is no older
    than the lease ttl (the ttl of the leader's process lease, which `node --ttl` sets for
    both; `DEFAULT_TTL_S` without one), and its node, same boot, is not dead or left
    (`views.members`). A diagnostic like every age here: a rival takes over only after a full
    ttl unchanged on its own monotonic clock. Returns `live`, `why` (None when live) and
    `ttl_ms`."""
    member = next((m for m in members if m["node"] == leader["node"]), None)
    ttl_ms = member["ttl_ms"] if member is not None else round(DEFAULT_TTL_S * 1000)
    age_ms = leader["record_age_ms"]
    why: str | None = None
    if age_ms > ttl_ms:
        why = f"the head record is older than the lease ttl of {ttl_ms / 1000:g} s"
    elif member is not None and member["boot"] == leader["boot"] and member["state"] in DOWN:
        why = f"its node is {member['state']}"
    return {"live": why is None, "why": why, "ttl_ms": ttl_ms}


async def view_lease(store: ObjectStore, clock: Clock, *, judge: bool = True) -> LeaseView:
    """The published head as a reader would find it, without repairing anything, with the
    liveness of its leader (`leader_liveness`, from the leader's process lease; unless not
    `judge`: a caller that reads the members judges it, without this extra read)."""
    view = LeaseView(store=store.url)
    try:
        record = await _read_head(store, view)
        if record is not None:
            meta = await store.head(record_path(record.lease.seq))
            now_ms = clock.wall_ms()
            view.head = _lease_row(record, now_ms, meta.last_modified_ms)
            if not judge:
                return view
            node = record.lease.owner.node
            found = await read_member(store, node, now_ms)
            members = [] if found is None else [member_row(node, *found)]
            leader = {"node": node, "boot": record.lease.owner.boot, **view.head}
            view.head.update(leader_liveness(leader, members))
    except CorruptRecord as error:
        view.problems.append(Problem(object=error.key or HEAD_PATH, error=str(error)))
    return view


async def _read_head(store: ObjectStore, view: LeaseView) -> LeaderAuthorityRecord | None:
    """LA §4.1.4 read-only: the pointer's record, or its successor while a publication is pending
    (LA-3); with no pointer, the discovered head (LA §4.1.5). A pointer that moves meanwhile is
    re-read, at most MAX_LEASE_HEAD_READ_ATTEMPTS times."""
    for _ in range(MAX_LEASE_HEAD_READ_ATTEMPTS):
        pointer = await read_pointer(store)
        if pointer is None:
            view.pointer_sequence = None
            record = await discover_head(store)
            if record is not None:
                view.notes.append("no head pointer: the head was found by listing (bootstrap)")
            return record
        seq = view.pointer_sequence = pointer.sequence
        record = await read_record(store, seq)
        successor = await read_record(store, seq + 1)
        if record is not None and successor is None:
            return record
        lagging = record is not None and successor is not None
        if lagging and await read_record(store, seq + 2) is None:
            view.notes.append(
                f"the head pointer lags one record ({seq} -> {seq + 1}): a writer's "
                "publication is pending; the next reader repairs it"
            )
            return successor
        again = await read_pointer(store)
        if again is not None and again.sequence > seq:
            continue  # the head moved (and may have been pruned under us): read it again
        if again is None or again.sequence < seq:
            fact = "disappeared" if again is None else f"regressed to sequence {again.sequence}"
        elif record is None:
            fact = f"points ahead to missing sequence {seq}"
        else:
            fact = f"at sequence {seq} lags by more than one record"
        raise CorruptRecord(f"{HEAD_PATH}: leader authority head {fact}", key=HEAD_PATH)
    raise StoreUnavailable(
        f"{HEAD_PATH}: leader authority head changed during {MAX_LEASE_HEAD_READ_ATTEMPTS} read "
        "attempts"
    )


def _lease_row(record: LeaderAuthorityRecord, now_ms: int, modified_ms: int) -> dict[str, Any]:
    lease = record.lease
    catalog = lease.catalog_manifest
    return {
        "sequence": lease.seq,
        "owner": {
            "node": lease.owner.node,
            "boot": lease.owner.boot,
            "process_term": lease.owner.process_term,
        },
        "token": lease.token,
        "renewal_sequence": lease.renewal_sequence,
        "record_age_ms": now_ms - modified_ms,
        "expires_at_ms": lease.expires_at_ms,
        "unexpired_by_local_wall_clock": lease.expires_at_ms > now_ms,
        "expires_in_ms": lease.expires_at_ms - now_ms,
        "expiry_note": DIAGNOSTIC,
        "catalog_sha256": None if catalog is None else catalog.sha256,
    }


async def audit_stable(store: ObjectStore, clock: Clock) -> AuthorityAudit:
    """Audit until the pointer is the same before and after (a live cluster may append during
    the audit), at most MAX_LEASE_HEAD_READ_ATTEMPTS times; the last audit is returned."""
    audit = await audit_authority(store, clock)
    for _ in range(MAX_LEASE_HEAD_READ_ATTEMPTS - 1):
        try:
            after = await read_pointer(store)
        except CorruptRecord:
            return audit  # already reported by the audit
        if (None if after is None else after.sequence) == audit.pointer_sequence:
            return audit
        audit = await audit_authority(store, clock)
    audit.notes.append(f"the head kept moving during {MAX_LEASE_HEAD_READ_ATTEMPTS} audits")
    return audit


def decisions_of(audit: AuthorityAudit) -> dict[str, Any]:
    """The decisions in the records still present, marked live when the head's chains reach
    them, plus the head's carried state (faults, release head, catalog, floors)."""
    outcomes: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    releases: list[dict[str, Any]] = []
    terms: dict[int, dict[str, Any]] = {}
    for seq in sorted(audit.records):
        record = audit.records[seq]
        lease = record.lease
        terms.setdefault(lease.token, {"token": lease.token, "first_sequence": seq})
        terms[lease.token].update(owner=lease.owner.node, boot=lease.owner.boot, last_sequence=seq)
        outcome = record.checkpoint_outcome
        if outcome is not None and record.outcome_head is not None:
            outcomes.append(
                {
                    "sequence": seq,
                    "epoch": outcome.epoch,
                    "checkpoint_id": outcome.checkpoint_id,
                    "verdict": outcome.verdict.value,
                    "live": record.outcome_head in audit.live_outcomes
                    or record.outcome_head in audit.live_commits,
                }
            )
        decision = record.assignment_decision
        if decision is not None and record.assignment_decision_head is not None:
            verdict = decision.verdict if isinstance(decision, AssignmentDrainDecision) else None
            decisions.append(
                {
                    "sequence": seq,
                    "kind": "recovery" if verdict is None else "drain",
                    "target_version": decision.target_version,
                    "verdict": None if verdict is None else verdict.value,
                    "live": record.assignment_decision_head in audit.live_decisions,
                }
            )
        commit = record.recovery_release_commit
        if commit is not None:
            release = commit.terminal.release
            releases.append(
                {"sequence": seq, "generation": release.generation, "epoch": release.epoch}
            )
    return {
        "terms": list(terms.values()),
        "outcomes": outcomes,
        "assignment_decisions": decisions,
        "releases": releases,
        **_carried(audit.head),
    }


def _carried(head: LeaderAuthorityRecord | None) -> dict[str, Any]:
    if head is None:
        return {"faults": None, "catalog": None, "outcome_floor": None, "decision_floor": None}
    of, df, catalog = (
        head.outcome_floor,
        head.assignment_decision_floor,
        head.lease.catalog_manifest,
    )
    return {
        "faults": {
            "revision": head.recovery_fault_revision,
            "slots": [
                {
                    "node": slot.publisher.participant.node_id,
                    "process_term": slot.publisher.process_term,
                    "request_sequence": slot.request_sequence,
                    "fault_sequence": slot.fault_sequence,
                    "active": slot.active,
                }
                for slot in head.recovery_fault_slots
            ],
        },
        "catalog": None
        if catalog is None
        else {"sha256": catalog.sha256, "entry_count": catalog.entry_count},
        "outcome_floor": None
        if of is None
        else {
            "authority_before_epoch": of.authority_before_epoch,
            "artifact_before_epoch": of.artifact_before_epoch,
            "terminal_anchor_epoch": None
            if of.terminal_anchor is None
            else of.terminal_anchor.epoch,
            "committed_anchor_epoch": None
            if of.committed_anchor is None
            else of.committed_anchor.epoch,
        },
        "decision_floor": None
        if df is None
        else {
            "before_target_version": df.before_target_version,
            "anchor_target_version": None
            if df.terminal_anchor_link is None
            else df.terminal_anchor_link.target_version,
        },
    }
