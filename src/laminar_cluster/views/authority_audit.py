"""A read-only audit of the whole leader authority log, for `laminar-cluster authority`
(LA §2.1, LA §3.2-§3.9, LA §3.12, LA §4.1.4, LA §4.4.3, LA §4.5.5, LA §4.6.4, LA §4.7;
LA-1..LA-4, LA-11, LA-13, LA-15, LA-16, LA-17, LA-21).

It never writes: the pointer and records are read directly (`load_published_head` repairs the
pointer; the outcome audit may create the deployment identity). Every listed record is decoded
and validated; over those present: tokens and renewal sequences never decrease, a token names
one owner, the catalog seal and the floors never move back, every link to a present record
names what that record admitted, the live chains from the head reach their floor anchors, the
latest release admission and its blob match, and the pointer lags by at most one. Each
violation is a `Problem` naming the object.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from laminar_cluster.authority.catalog import load_catalog_manifest
from laminar_cluster.authority.recovery_terminal import load_recovery_release_terminal
from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import (
    DEFAULT_TTL_S,
    MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS,
    MAX_LIVE_AUTHORITY_LINKS,
)
from laminar_cluster.lease.log import read_pointer, read_record
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX, parse_record_path, record_path
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    LeaderAuthorityRecord,
    OutcomeLink,
    RecoveryReleaseLink,
)
from laminar_cluster.store import ObjectStore

READ_LANES: Final = 16  # record GETs in flight at once
L = TypeVar("L", OutcomeLink, AssignmentDecisionLink)
AnyLink = TypeVar("AnyLink", OutcomeLink, AssignmentDecisionLink, RecoveryReleaseLink)


@dataclass(frozen=True, slots=True)
class Problem:
    object: str  # the path of the offending object (or prefix)
    error: str


@dataclass
class AuthorityAudit:
    """What the audit found. `records` holds every record that decoded and validated."""

    store: str
    pointer_sequence: int | None = None
    head_sequence: int | None = None
    listed: int = 0
    records: dict[int, LeaderAuthorityRecord] = field(default_factory=dict)
    live_outcomes: set[OutcomeLink] = field(default_factory=set)
    live_commits: set[OutcomeLink] = field(default_factory=set)
    live_decisions: set[AssignmentDecisionLink] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> LeaderAuthorityRecord | None:
        return None if self.head_sequence is None else self.records.get(self.head_sequence)

    def problem(self, key: str, error: str) -> None:
        self.problems.append(Problem(object=key, error=error))


async def audit_authority(store: ObjectStore, clock: Clock) -> AuthorityAudit:
    """Audit every record from the pointer down; read-only."""
    audit = AuthorityAudit(store=store.url)
    pointer: int | None = None
    try:
        current = await read_pointer(store)
        pointer = None if current is None else current.sequence
    except CorruptRecord as error:
        audit.problem(error.key or HEAD_PATH, str(error))
    audit.pointer_sequence = pointer
    listed = await _list_sequences(store, audit)
    await _read_all(store, listed, audit)
    _locate_head(audit, pointer, listed)
    ordered = [audit.records[seq] for seq in sorted(audit.records)]
    for older, newer in itertools.pairwise(ordered):
        _check_progression(audit, older, newer)
    for record in ordered:
        _check_links(audit, record)
    head = audit.head
    if head is not None:
        _walk_live_chains(audit, head)
        reader = LeaderLeaseStore(store, clock=clock, ttl_s=DEFAULT_TTL_S)  # blob reads only
        await _check_release_and_catalog(audit, reader, head)
    return audit


async def _list_sequences(store: ObjectStore, audit: AuthorityAudit) -> list[int]:
    """Canonical record sequences under the prefix, ascending; strays are problems (LA-11)."""
    entries = await store.list(RECORDS_PREFIX)
    if len(entries) > MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS:  # LA-21: audit the newest only
        bound = MAX_AUTHORITY_HEAD_DISCOVERY_RECORDS
        audit.problem(RECORDS_PREFIX, f"history exceeds the {bound}-record bound (prune stuck?)")
        entries = entries[-bound:]
    audit.listed = len(entries)
    sequences = []
    for entry in entries:
        try:
            sequences.append(parse_record_path(entry.key))
        except CorruptRecord as error:
            audit.problem(entry.key, str(error))
    return sorted(sequences)


async def _read_all(store: ObjectStore, sequences: list[int], audit: AuthorityAudit) -> None:
    """Read, decode and validate every listed record (LA-1, LA-11) in READ_LANES lanes. A record
    that vanished since the LIST was pruned meanwhile and is skipped."""

    async def lane(part: list[int]) -> list[tuple[int, LeaderAuthorityRecord | CorruptRecord]]:
        found: list[tuple[int, LeaderAuthorityRecord | CorruptRecord]] = []
        for seq in part:
            try:
                record = await read_record(store, seq)
            except CorruptRecord as error:
                found.append((seq, error))
                continue
            if record is not None:
                found.append((seq, record))
        return found

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(lane(sequences[i::READ_LANES])) for i in range(READ_LANES)]
    results = sorted((item for task in tasks for item in task.result()), key=lambda item: item[0])
    for seq, result in results:
        if isinstance(result, CorruptRecord):
            audit.problem(result.key or record_path(seq), str(result))
        else:
            audit.records[seq] = result


def _locate_head(audit: AuthorityAudit, pointer: int | None, listed: list[int]) -> None:
    """The head is the pointer's record, or its successor while a publication is pending; the
    pointer lags by at most one record and never names a missing one (LA-2, LA-3)."""
    if pointer is None:
        if listed:
            audit.head_sequence = listed[-1]
            audit.notes.append("no head pointer: the head was found by listing (bootstrap)")
        return
    present = set(listed)
    if pointer not in present:
        audit.problem(
            HEAD_PATH, f"leader authority head points ahead to missing sequence {pointer}"
        )
    for seq in (seq for seq in listed if seq > pointer + 1):
        audit.problem(
            record_path(seq),
            f"record exists while the head pointer is at sequence {pointer}: the pointer lags "
            "by more than one record",
        )
    if pointer + 1 in present:
        audit.head_sequence = pointer + 1
        audit.notes.append(
            f"the head pointer lags one record ({pointer} -> {pointer + 1}): a writer's "
            "publication is pending; the next reader repairs it"
        )
    elif pointer in present:
        audit.head_sequence = pointer


def _check_progression(
    audit: AuthorityAudit, older: LeaderAuthorityRecord, newer: LeaderAuthorityRecord
) -> None:
    """Counters and carried state between two present records, older.seq < newer.seq."""
    key = record_path(newer.lease.seq)
    a, b = older.lease, newer.lease
    span = f"sequence {a.seq} -> {b.seq}"
    if b.token < a.token:  # LA-4: tokens never decrease
        audit.problem(key, f"fencing token regresses from {a.token} to {b.token} ({span})")
    elif b.token == a.token and b.owner != a.owner:  # LA-4: one token, one owner term
        audit.problem(key, f"fencing token {b.token} names two owners ({span})")
    elif b.token > a.token and b.renewal_sequence <= a.renewal_sequence:
        audit.problem(key, f"fencing token advanced without a liveness renewal ({span})")
    if b.renewal_sequence < a.renewal_sequence:
        audit.problem(key, f"renewal sequence regresses ({span})")
    if a.catalog_manifest is not None and b.catalog_manifest != a.catalog_manifest:  # LA-17
        audit.problem(key, f"catalog manifest seal changed or vanished ({span})")
    if older.recovery_fault_revision > newer.recovery_fault_revision:
        audit.problem(key, f"recovery fault revision regresses ({span})")
    of, nf = older.outcome_floor, newer.outcome_floor
    if of is not None and (
        nf is None
        or nf.authority_before_epoch < of.authority_before_epoch
        or nf.artifact_before_epoch < of.artifact_before_epoch
    ):
        audit.problem(key, f"outcome floor moves back ({span})")  # LA §4.4.8
    af, naf = older.assignment_decision_floor, newer.assignment_decision_floor
    if af is not None and (naf is None or naf.before_target_version < af.before_target_version):
        audit.problem(key, f"assignment-decision floor moves back ({span})")
    ar, nr = older.recovery_release_head, newer.recovery_release_head
    if ar is not None and (
        nr is None or nr.terminal.release.generation < ar.terminal.release.generation
    ):
        audit.problem(key, f"recovery release generation regresses ({span})")  # LA-16


def _admits_outcome(record: LeaderAuthorityRecord, link: OutcomeLink) -> bool:
    outcome = record.checkpoint_outcome
    return (
        outcome is not None
        and record.outcome_head == link
        and (outcome.epoch, outcome.checkpoint_id) == (link.epoch, link.checkpoint_id)
    )


def _admits_commit(record: LeaderAuthorityRecord, link: OutcomeLink) -> bool:
    outcome = record.checkpoint_outcome
    return (
        outcome is not None
        and outcome.is_commit()
        and record.commit_head == link
        and (outcome.epoch, outcome.checkpoint_id) == (link.epoch, link.checkpoint_id)
    )


def _admits_decision(record: LeaderAuthorityRecord, link: AssignmentDecisionLink) -> bool:
    decision = record.assignment_decision
    return (
        decision is not None
        and record.assignment_decision_head == link
        and decision.target_version == link.target_version
    )


def _admits_release(record: LeaderAuthorityRecord, link: RecoveryReleaseLink) -> bool:
    commit = record.recovery_release_commit
    return (
        commit is not None
        and record.recovery_release_head == link
        and commit.terminal == link.terminal
    )


def _check_links(audit: AuthorityAudit, record: LeaderAuthorityRecord) -> None:
    """Every link of `record` whose target record is still present names exactly what that
    record admitted (LA-13, LA-15: a pruned target is only ever compared, never needed)."""
    key = record_path(record.lease.seq)
    _check_link(audit, key, "previous_outcome", record.previous_outcome, _admits_outcome)
    _check_link(audit, key, "outcome_head", record.outcome_head, _admits_outcome)
    _check_link(audit, key, "previous_commit", record.previous_commit, _admits_commit)
    _check_link(audit, key, "commit_head", record.commit_head, _admits_commit)
    previous_decision = record.previous_assignment_decision
    _check_link(audit, key, "previous_assignment_decision", previous_decision, _admits_decision)
    decision_head = record.assignment_decision_head
    _check_link(audit, key, "assignment_decision_head", decision_head, _admits_decision)
    release_head = record.recovery_release_head
    _check_link(audit, key, "recovery_release_head", release_head, _admits_release)


def _check_link(
    audit: AuthorityAudit,
    key: str,
    name: str,
    link: AnyLink | None,
    admits: Callable[[LeaderAuthorityRecord, AnyLink], bool],
) -> None:
    if link is None:
        return
    target = audit.records.get(link.sequence)
    if target is not None and not admits(target, link):
        audit.problem(key, f"{name} names sequence {link.sequence}, which does not admit it")


def _walk_live_chains(audit: AuthorityAudit, head: LeaderAuthorityRecord) -> None:
    """The live terminal, Commit and assignment-decision chains from the head: every live link's
    record is present and admits it, and each chain leaves at exactly its floor's anchor link
    (LA §4.4.3 steps 1-3, LA §4.5.5; LA-13, LA-15). Each walk is bounded (LA-21)."""
    floor, decision_floor = head.outcome_floor, head.assignment_decision_floor
    terminal = (
        (0, None) if floor is None else (floor.authority_before_epoch, floor.terminal_anchor_link)
    )
    artifact = (
        (0, None) if floor is None else (floor.artifact_before_epoch, floor.committed_anchor_link)
    )
    decisions = (
        (0, None)
        if decision_floor is None
        else (decision_floor.before_target_version, decision_floor.terminal_anchor_link)
    )
    audit.live_outcomes = _walk(
        audit,
        head,
        "terminal outcome",
        head.outcome_head,
        terminal,
        lambda link: link.epoch,
        _admits_outcome,
        lambda record: record.previous_outcome,
    )
    audit.live_commits = _walk(
        audit,
        head,
        "Commit",
        head.commit_head,
        artifact,
        lambda link: link.epoch,
        _admits_commit,
        lambda record: record.previous_commit,
    )
    audit.live_decisions = _walk(
        audit,
        head,
        "assignment-decision",
        head.assignment_decision_head,
        decisions,
        lambda link: link.target_version,
        _admits_decision,
        lambda record: record.previous_assignment_decision,
    )


def _walk(
    audit: AuthorityAudit,
    head: LeaderAuthorityRecord,
    what: str,
    link: L | None,
    floor: tuple[int, L | None],  # (links below this are compacted, the one link to leave at)
    horizon: Callable[[L], int],  # a link's epoch or target version
    admits: Callable[[LeaderAuthorityRecord, L], bool],
    previous: Callable[[LeaderAuthorityRecord], L | None],
) -> set[L]:
    head_key = record_path(head.lease.seq)
    before, anchor = floor
    live: set[L] = set()
    for _ in range(MAX_LIVE_AUTHORITY_LINKS):
        if link is None:
            if anchor is not None:
                audit.problem(head_key, f"{what} chain ends without reaching its floor anchor")
            return live
        if horizon(link) < before:
            if link != anchor:
                audit.problem(
                    head_key, f"{what} floor does not anchor the retained authority chain"
                )
            return live
        key = record_path(link.sequence)
        record = audit.records.get(link.sequence)
        if record is None:
            if not any(problem.object == key for problem in audit.problems):
                audit.problem(key, f"live {what} record is missing from the authority log")
            return live
        if not admits(record, link):
            audit.problem(key, f"retained {what} authority chain is broken at {link}")
            return live
        live.add(link)
        link = previous(record)
    audit.problem(
        head_key, f"live {what} retention exceeds the fixed {MAX_LIVE_AUTHORITY_LINKS}-link bound"
    )
    return live


async def _check_release_and_catalog(
    audit: AuthorityAudit, authority: LeaderLeaseStore, head: LeaderAuthorityRecord
) -> None:
    """The latest release admission is present and matches its link, and its terminal blob
    loads (revalidated) with the admission's proof (LA-16, LA-11); the sealed catalog blob loads
    and matches its reference (LA-17)."""
    link = head.recovery_release_head
    if link is not None:
        key = record_path(link.sequence)
        admission = audit.records.get(link.sequence)
        commit = None if admission is None else admission.recovery_release_commit
        if admission is None or commit is None or not _admits_release(admission, link):
            if not any(problem.object == key for problem in audit.problems):
                audit.problem(key, "retained recovery release authority link is broken")
        else:
            try:
                terminal = await load_recovery_release_terminal(authority, link.terminal)
            except CorruptRecord as error:
                audit.problem(error.key or key, str(error))
            else:
                if terminal.round.leader_proof != commit.leader_proof:
                    audit.problem(key, "recovery release terminal does not match its admission")
    catalog = head.lease.catalog_manifest
    if catalog is not None:
        try:
            await load_catalog_manifest(authority, catalog)
        except CorruptRecord as error:
            audit.problem(error.key or record_path(head.lease.seq), str(error))
