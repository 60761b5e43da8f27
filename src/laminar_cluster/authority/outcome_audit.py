"""The outcome audit every cluster-outcome read and write shares (LA §3.5,
LA §4.4.3; invariants LA-13, LA-11, LA-21).

`audit_outcomes(authority, head)` walks the terminal chain from `outcome_head` down to the
terminal floor, checking the Commit head each record carries, and checks where it ends against
the terminal anchor; walks the Commit chain down to the artifact floor (records are read once);
cross-checks both chains and the anchors; merges them by epoch (duplicates must be identical);
and checks the deployment and the strict increase of epoch and checkpoint_id. Each walk follows
at most MAX_LIVE_AUTHORITY_LINKS links (LA-21). A record missing mid-walk is InventoryChanged (a
concurrent prune: retry the whole read); any other inconsistency is CorruptRecord naming the
record (LA-11).

The audit cache keeps one snapshot per `LeaderLeaseStore` instance, keyed by (outcome_head,
commit_head, floor) and tagged with the highest authority sequence seen for that key: an
install never replaces a newer entry, cold audits of one key are single-flighted, failures are
never cached. It is an optimisation only; correctness never depends on it.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.errors import CorruptRecord, InventoryChanged
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import AuthorityOutcomeFloor, LeaderAuthorityRecord, OutcomeLink

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

AuditKey = tuple[OutcomeLink | None, OutcomeLink | None, AuthorityOutcomeFloor | None]


@dataclass(frozen=True, slots=True)
class OutcomeSnapshot:
    """The audited outcomes of one head, ascending by epoch (anchors and lagged Commits
    included), with the live terminal and Commit links (ascending) they were read through."""

    outcomes: tuple[CheckpointOutcome, ...]
    terminal_links: tuple[OutcomeLink, ...]
    commit_links: tuple[OutcomeLink, ...]


def audit_key(head: LeaderAuthorityRecord) -> AuditKey:
    """What an audit depends on: both outcome heads and the floor (not the lease)."""
    return (head.outcome_head, head.commit_head, head.outcome_floor)


async def audit_outcomes(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord
) -> OutcomeSnapshot:
    """The full, uncached audit of `head`'s outcome history (LA §4.4.3 steps 1-7)."""
    records: dict[int, LeaderAuthorityRecord] = {head.lease.seq: head}  # read once each
    walk = await _terminal_walk(authority, head, records)
    commits, commit_links = await _commit_walk(authority, head, records)
    terminal, terminal_links = walk.outcomes, walk.links
    _cross_check(head, walk.expected_commit_head, terminal, terminal_links, commit_links)
    merged = _merge(head, terminal, commits)
    deployment_id = await authority.require_decisions().load_or_create_deployment_id()
    _check_deployment_and_order(head, merged, deployment_id)
    return OutcomeSnapshot(tuple(merged), tuple(terminal_links), tuple(commit_links))


@dataclass
class _TerminalWalk:
    outcomes: list[CheckpointOutcome] = field(default_factory=list)  # ascending after the walk
    links: list[OutcomeLink] = field(default_factory=list)
    expected_commit_head: OutcomeLink | None = None


def corrupt(seq: int, message: str) -> CorruptRecord:
    """CorruptRecord naming authority record `seq`."""
    key = record_path(seq)
    return CorruptRecord(f"{key}: {message}", key=key)


async def read_linked_outcome(
    authority: LeaderLeaseStore,
    records: dict[int, LeaderAuthorityRecord],
    link: OutcomeLink,
    *,
    commit_chain: bool,
) -> tuple[LeaderAuthorityRecord, CheckpointOutcome]:
    """The record a link names (each read once per walk: `records` holds those already read)
    and the outcome it admits, which the link must name exactly, as that record's own chain
    head (a Commit on the Commit chain). Missing: InventoryChanged (a prune moved it)."""
    what = "Commit" if commit_chain else "outcome"
    record = records.get(link.sequence)
    if record is None:
        record = await read_record(authority.store, link.sequence)
        if record is None:
            raise InventoryChanged(
                f"{record_path(link.sequence)}: cluster {what} authority record "
                f"{link.sequence} disappeared during a chain walk"
            )
        records[link.sequence] = record
    outcome = record.checkpoint_outcome
    if outcome is None:
        raise corrupt(
            link.sequence,
            f"cluster {what} head epoch {link.epoch} points to non-outcome authority record "
            f"{link.sequence}",
        )
    if (
        (record.commit_head if commit_chain else record.outcome_head) != link
        or (commit_chain and not outcome.is_commit())
        or (outcome.epoch, outcome.checkpoint_id) != (link.epoch, link.checkpoint_id)
    ):
        raise corrupt(
            link.sequence,
            f"cluster {what} link epoch {link.epoch} sequence {link.sequence} does not match "
            "its authority record",
        )
    return record, outcome


def ends_at_anchor(
    link: OutcomeLink | None, anchor_link: OutcomeLink | None, anchor: CheckpointOutcome | None
) -> bool:
    """A chain walk left its floor exactly at the anchor link (or at the end, without one)."""
    if link is None:
        return anchor_link is None and anchor is None
    return (
        anchor is not None
        and link == anchor_link
        and (link.epoch, link.checkpoint_id) == (anchor.epoch, anchor.checkpoint_id)
    )


def _budget(traversed: int, what: str, seq: int) -> None:
    # LA-21: work per walk is bounded; a longer live chain is never produced by this protocol.
    if traversed >= MAX_LIVE_AUTHORITY_LINKS:
        raise corrupt(
            seq,
            f"live {what} retention exceeds the fixed {MAX_LIVE_AUTHORITY_LINKS}-link "
            "authority bound",
        )


async def _terminal_walk(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    records: dict[int, LeaderAuthorityRecord],
) -> _TerminalWalk:
    """LA §4.4.3 steps 1-2: the live terminal chain, newest first, then its end at the floor."""
    floor = head.outcome_floor
    before = 0 if floor is None else floor.authority_before_epoch
    walk = _TerminalWalk(expected_commit_head=head.commit_head)
    link = head.outcome_head
    while link is not None and link.epoch >= before:
        _budget(len(walk.links), "outcome", head.lease.seq)
        record, outcome = await read_linked_outcome(authority, records, link, commit_chain=False)
        # LA-13: every terminal record carries the Commit head the chain above it expects.
        if record.commit_head != walk.expected_commit_head:
            raise corrupt(
                link.sequence,
                f"cluster outcome epoch {outcome.epoch} did not preserve the exact Commit head",
            )
        walk.expected_commit_head = (
            record.previous_commit if outcome.is_commit() else record.commit_head
        )
        walk.outcomes.append(outcome)
        walk.links.append(link)
        link = record.previous_outcome
    _check_chain_end(
        head,
        link,
        None if floor is None else (floor.terminal_anchor_link, floor.terminal_anchor),
        f"cluster outcome chain does not meet durable floor {before} at its terminal anchor",
        "cluster outcome chain stopped without a durable retention floor",
    )
    walk.outcomes.reverse()
    walk.links.reverse()
    return walk


async def _commit_walk(
    authority: LeaderLeaseStore,
    head: LeaderAuthorityRecord,
    records: dict[int, LeaderAuthorityRecord],
) -> tuple[list[CheckpointOutcome], list[OutcomeLink]]:
    """LA §4.4.3 step 3: the live Commit chain (ascending), ending at the committed anchor."""
    floor = head.outcome_floor
    before = 0 if floor is None else floor.artifact_before_epoch
    outcomes: list[CheckpointOutcome] = []
    links: list[OutcomeLink] = []
    link = head.commit_head
    while link is not None and link.epoch >= before:
        _budget(len(links), "Commit", head.lease.seq)
        record, outcome = await read_linked_outcome(authority, records, link, commit_chain=True)
        outcomes.append(outcome)
        links.append(link)
        link = record.previous_commit
    _check_chain_end(
        head,
        link,
        None if floor is None else (floor.committed_anchor_link, floor.committed_anchor),
        f"cluster Commit chain does not meet durable artifact floor {before} at its committed "
        "anchor",
        "cluster Commit chain stopped without a durable retention floor",
    )
    outcomes.reverse()
    links.reverse()
    return outcomes, links


def _check_chain_end(
    head: LeaderAuthorityRecord,
    link: OutcomeLink | None,
    anchor: tuple[OutcomeLink | None, CheckpointOutcome | None] | None,
    below_floor: str,
    no_floor: str,
) -> None:
    """A walk ends exactly at its floor's anchor link, or at the chain's end with no anchor."""
    if anchor is None:
        if link is not None:
            raise corrupt(head.lease.seq, no_floor)
    elif not ends_at_anchor(link, *anchor):
        raise corrupt(head.lease.seq, below_floor)


def _link_at(links: list[OutcomeLink], epoch: int) -> OutcomeLink | None:
    for link in links:
        if link.epoch == epoch:
            return link
    return None


def _cross_check(
    head: LeaderAuthorityRecord,
    expected_commit_head: OutcomeLink | None,
    terminal: list[CheckpointOutcome],
    terminal_links: list[OutcomeLink],
    commit_links: list[OutcomeLink],
) -> None:
    """LA §4.4.3 step 4 (LA-13): both chains agree with each other and with the floor's anchors."""
    floor = head.outcome_floor
    boundary: OutcomeLink | None = None
    if floor is not None and floor.terminal_anchor is not None:
        anchor_epoch = floor.terminal_anchor.epoch
        older = [link for link in commit_links if link.epoch <= anchor_epoch]
        boundary = older[-1] if older else floor.committed_anchor_link
    if expected_commit_head != boundary:
        raise corrupt(
            head.lease.seq,
            "cluster terminal chain does not preserve Commit continuity at its durable floor",
        )
    for outcome, terminal_link in zip(terminal, terminal_links, strict=True):
        if outcome.is_commit() and _link_at(commit_links, outcome.epoch) != terminal_link:
            raise corrupt(
                terminal_link.sequence,
                f"cluster Commit epoch {outcome.epoch} is not linked identically from both "
                "durable outcome heads",
            )
    if floor is None or floor.terminal_anchor is None or not floor.terminal_anchor.is_commit():
        return
    anchor = floor.terminal_anchor
    if anchor.epoch >= floor.artifact_before_epoch:
        commit_link = _link_at(commit_links, anchor.epoch)
    else:
        commit_link = floor.committed_anchor_link if floor.committed_anchor == anchor else None
    if commit_link is None or commit_link != floor.terminal_anchor_link:
        raise corrupt(
            head.lease.seq,
            f"cluster terminal Commit anchor epoch {anchor.epoch} is not linked identically "
            "from the Commit chain",
        )


def _merge(
    head: LeaderAuthorityRecord,
    terminal: list[CheckpointOutcome],
    commits: list[CheckpointOutcome],
) -> list[CheckpointOutcome]:
    """LA §4.4.3 step 5: anchors and both chains by epoch; one epoch, one identical outcome."""
    floor = head.outcome_floor
    everything: list[CheckpointOutcome] = []
    if floor is not None:
        everything.extend(a for a in (floor.committed_anchor, floor.terminal_anchor) if a)
    everything.extend(terminal)
    everything.extend(commits)
    everything.sort(key=lambda outcome: outcome.epoch)
    merged: list[CheckpointOutcome] = []
    for outcome in everything:
        if merged and merged[-1].epoch == outcome.epoch:
            # LA-13: at most one outcome per epoch, wherever it is read from.
            if merged[-1] != outcome:
                raise corrupt(
                    head.lease.seq,
                    f"cluster outcome epoch {outcome.epoch} has conflicting terminal and "
                    "Commit-chain records",
                )
            continue
        merged.append(outcome)
    return merged


def _check_deployment_and_order(
    head: LeaderAuthorityRecord, merged: list[CheckpointOutcome], deployment_id: str
) -> None:
    """LA §4.4.3 step 6 (LA-13): one deployment; epoch and checkpoint_id strictly increase."""
    for outcome in merged:
        if outcome.deployment_id != deployment_id:
            raise corrupt(
                head.lease.seq,
                f"cluster outcome epoch {outcome.epoch} belongs to deployment "
                f"{outcome.deployment_id}, current deployment is {deployment_id}",
            )
    for previous, current in itertools.pairwise(merged):
        if current.epoch <= previous.epoch or current.checkpoint_id <= previous.checkpoint_id:
            raise corrupt(
                head.lease.seq,
                f"cluster outcomes regress from epoch {previous.epoch} checkpoint "
                f"{previous.checkpoint_id} to epoch {current.epoch} checkpoint "
                f"{current.checkpoint_id}",
            )


@dataclass
class _Entry:  # the audit cache (LA §4.4.3): one entry per LeaderLeaseStore instance
    key: AuditKey
    authority_sequence: int  # the highest head sequence this key was seen at
    snapshot: OutcomeSnapshot


@dataclass
class AuditCache:
    """One authority instance's cached audit and its single-flight gates."""

    entry: _Entry | None = None
    flights: weakref.WeakValueDictionary[AuditKey, asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )

    def lookup(self, key: AuditKey, authority_sequence: int) -> OutcomeSnapshot | None:
        """The cached snapshot of `key`; a hit raises the entry's tag to `authority_sequence`."""
        entry = self.entry
        if entry is None or entry.key != key:
            return None
        entry.authority_sequence = max(entry.authority_sequence, authority_sequence)
        return entry.snapshot

    def install(self, key: AuditKey, authority_sequence: int, snapshot: OutcomeSnapshot) -> None:
        """Replace the entry only with a newer tag, or the same tag and key: an older
        concurrent audit never overwrites a newer entry."""
        entry = self.entry
        if (
            entry is None
            or entry.authority_sequence < authority_sequence
            or (entry.authority_sequence == authority_sequence and entry.key == key)
        ):
            self.entry = _Entry(key, authority_sequence, snapshot)

    def gate(self, key: AuditKey) -> asyncio.Lock:
        """The single-flight lock of `key`; dropped once no audit of `key` holds it."""
        lock = self.flights.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self.flights[key] = lock
        return lock

    def clear(self) -> None:
        self.entry = None


_CACHES: Final[weakref.WeakKeyDictionary[LeaderLeaseStore, AuditCache]] = (
    weakref.WeakKeyDictionary()
)


def audit_cache(authority: LeaderLeaseStore) -> AuditCache:
    """The audit cache of one authority instance (it lives as long as the instance)."""
    cache = _CACHES.get(authority)
    if cache is None:
        cache = AuditCache()
        _CACHES[authority] = cache
    return cache


async def cached_audit(authority: LeaderLeaseStore, head: LeaderAuthorityRecord) -> OutcomeSnapshot:
    """`audit_outcomes(head)` through the instance's cache, single-flighted per key."""
    cache = audit_cache(authority)
    key, seq = audit_key(head), head.lease.seq
    hit = cache.lookup(key, seq)
    if hit is not None:
        return hit
    async with cache.gate(key):
        hit = cache.lookup(key, seq)
        if hit is not None:
            return hit
        snapshot = await audit_outcomes(authority, head)  # a failure is never cached
        cache.install(key, seq, snapshot)
        return snapshot
