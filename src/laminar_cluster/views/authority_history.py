"""The recent history of a cluster as its leader authority log records it, read incrementally
for the console (issue 17): leader terms, checkpoint outcomes and assignment decisions.

`AuthorityHistory.update(head)` walks back from the head record along the chains the head
links (`outcome_head` -> `previous_outcome` ..., `assignment_decision_head` ->
`previous_assignment_decision` ...) and stops at the first link it already holds: authority
records are create-only, so each one is read at most once per reader and kept (DESIGN.md "Cheap
polling"). A refresh with nothing new reads nothing; each new outcome costs one GET of its
record (its last-modified time is when the outcome was admitted), one HEAD of the attempt's
`prepare.json` (when the checkpoint started: duration = admitted - prepared, both on the
store's clock) and, for a Commit, one GET of the deployment identity and one of its recovery
capsule (the committed source offsets, whose total is the events committed so far). At most
`NEW_LINKS_MAX` links are read per chain per update; at most `KEPT_MAX` entries are kept.

Leader terms are gathered from every record read (and every head the caller passes): token,
owner node, and the first and last time a record of that token was seen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import CheckpointOutcome, ClusterRecoveryCapsule
from laminar_cluster.connectors.eventlog_segments import (
    EVENT_LOG_LAYOUT_BYTES_MAX,
    LAYOUT_PATH,
    decode_layout,
)
from laminar_cluster.coordinator.paths import prepare_path
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.lease.limits import MAX_AUTHORITY_RECORD_BYTES
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    LeaderAuthorityRecord,
    OutcomeLink,
)
from laminar_cluster.lease.validate import decode_record
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.status_lag import log_events

NEW_LINKS_MAX: Final = 32  # records read per chain per update
KEPT_MAX: Final = 120  # outcomes, decisions and terms kept (the page shows the newest)

CapsuleOf = Callable[[CheckpointOutcome], Awaitable[ClusterRecoveryCapsule]]


@dataclass
class AuthorityHistory:
    """What a reader has learned so far (the class docstring is the module's)."""

    store: ObjectStore
    capsule_of: CapsuleOf
    records: dict[int, tuple[LeaderAuthorityRecord, int]] = field(default_factory=dict)
    checkpoints: dict[int, dict[str, Any]] = field(default_factory=dict)  # by outcome sequence
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)  # by decision sequence
    terms: dict[int, dict[str, Any]] = field(default_factory=dict)  # by fencing token
    problems: list[str] = field(default_factory=list)
    log_partitions: int | None = None  # the event log's, once its layout was read

    async def update(self, head: LeaderAuthorityRecord, seen_ms: int) -> None:
        """Read what is new below `head` (seen at `seen_ms` by the caller's wall clock)."""
        self.problems = []
        self._term(head, seen_ms)
        await self._walk(
            head.outcome_head.sequence if head.outcome_head else None,
            self.checkpoints,
            self._checkpoint,
            lambda record: record.previous_outcome,
        )
        await self._walk(
            head.assignment_decision_head.sequence if head.assignment_decision_head else None,
            self.decisions,
            _decision_row,
            lambda record: record.previous_assignment_decision,
        )
        _trim(self.checkpoints)
        _trim(self.decisions)
        _trim(self.terms)
        _events_per_checkpoint(self.checkpoints)

    async def _walk(
        self,
        seq: int | None,
        rows: dict[int, dict[str, Any]],
        row_of: Callable[[LeaderAuthorityRecord, int], Awaitable[dict[str, Any] | None]],
        previous: Callable[[LeaderAuthorityRecord], OutcomeLink | AssignmentDecisionLink | None],
    ) -> None:
        """From the record at `seq` back along `previous` until a record already in `rows`
        (or one pruned meanwhile, or not admitting what its link names), at most
        NEW_LINKS_MAX records."""
        for _ in range(NEW_LINKS_MAX):
            if seq is None or seq in rows:
                return
            record, admitted_ms = await self._record(seq)
            row = None if record is None else await row_of(record, admitted_ms)
            if record is None or row is None:
                return  # pruned meanwhile: the older history is gone
            rows[seq] = row
            link = previous(record)
            seq = None if link is None else link.sequence

    def as_json(self) -> dict[str, Any]:
        """Oldest first: `terms`, `checkpoints`, `decisions`."""
        return {
            "terms": [self.terms[token] for token in sorted(self.terms)],
            "checkpoints": [self.checkpoints[seq] for seq in sorted(self.checkpoints)],
            "decisions": [self.decisions[seq] for seq in sorted(self.decisions)],
            "problems": self.problems,
        }

    async def _log_partitions(self) -> int | None:
        """The event log's declared partitions (read until it is declared; a layout is
        create-only, so once is enough)."""
        if self.log_partitions is None:
            read = await read_bytes(
                self.store,
                LAYOUT_PATH,
                what="event log layout",
                max_bytes=EVENT_LOG_LAYOUT_BYTES_MAX,
            )
            self.log_partitions = None if read is None else decode_layout(read[0]).partitions
        return self.log_partitions

    async def _record(self, seq: int) -> tuple[LeaderAuthorityRecord | None, int]:
        """Record `seq` with its last-modified time, read once; (None, 0) when absent."""
        kept = self.records.get(seq)
        if kept is not None:
            return kept
        key = record_path(seq)
        read = await read_bytes(
            self.store, key, what="leader authority record", max_bytes=MAX_AUTHORITY_RECORD_BYTES
        )
        if read is None:
            return None, 0
        record = decode_record(read[0], key, seq)
        self.records[seq] = (record, read[1].last_modified_ms)
        _trim(self.records)
        self._term(record, read[1].last_modified_ms)
        return record, read[1].last_modified_ms

    def _term(self, record: LeaderAuthorityRecord, at_ms: int) -> None:
        lease = record.lease
        term = self.terms.setdefault(
            lease.token,
            {"token": lease.token, "node": lease.owner.node, "from_ms": at_ms, "to_ms": at_ms},
        )
        term["from_ms"] = min(term["from_ms"], at_ms)
        term["to_ms"] = max(term["to_ms"], at_ms)

    async def _checkpoint(
        self, record: LeaderAuthorityRecord, admitted_ms: int
    ) -> dict[str, Any] | None:
        outcome = record.checkpoint_outcome
        if outcome is None:
            return None
        row: dict[str, Any] = {
            "epoch": outcome.epoch,
            "checkpoint_id": outcome.checkpoint_id,
            "verdict": outcome.verdict.value,
            "at_ms": admitted_ms,
            "duration_ms": None,
            "committed_events": None,
            "events": None,
        }
        try:
            prepared = await self.store.head(prepare_path(outcome.checkpoint_id))
            row["duration_ms"] = max(0, admitted_ms - prepared.last_modified_ms)
        except ObjectNotFound:
            pass  # retention removed the attempt's objects: the duration is unknown
        if outcome.is_commit():
            try:
                capsule = await self.capsule_of(outcome)
            except CorruptRecord as error:
                self.problems.append(str(error))
            else:
                row["committed_events"] = log_events(
                    capsule.source_offsets, await self._log_partitions()
                )
        return row


async def _decision_row(record: LeaderAuthorityRecord, admitted_ms: int) -> dict[str, Any] | None:
    decision = record.assignment_decision
    if decision is None:
        return None
    drain = decision if isinstance(decision, AssignmentDrainDecision) else None
    return {
        "target_version": decision.target_version,
        "kind": "recovery" if drain is None else "drain",
        "verdict": None if drain is None else drain.verdict.value,
        "leader": decision.leader_proof.owner.node_id,
        "token": decision.leader_proof.fencing_token,
        "at_ms": admitted_ms,
    }


def _events_per_checkpoint(checkpoints: dict[int, dict[str, Any]]) -> None:
    """Each Commit's events: its committed total minus the previous known Commit's."""
    previous: int | None = None
    for seq in sorted(checkpoints):
        row = checkpoints[seq]
        total = row["committed_events"]
        if total is None:
            continue
        row["events"] = None if previous is None else max(0, total - previous)
        previous = total


def _trim(kept: dict[int, Any]) -> None:
    for key in sorted(kept)[: max(0, len(kept) - KEPT_MAX)]:
        del kept[key]
