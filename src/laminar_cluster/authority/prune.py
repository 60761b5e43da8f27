"""History pruning and garbage collection of the leader authority (LA §4.8.1 scheduling, LA §4.8.2
prune_history, LA §4.8.3 release-terminal GC, LA §4.8.4 grace; LA §6 "Background prune"; invariants
LA-2 and LA-21, with LA-13/LA-11 for the chains it verifies before deleting).

`prune_history` first computes the retained set from the published head: the head and head-1,
every record on the live terminal and Commit chains (the LA §4.4.3 audit, through the instance's
cache: `outcome_audit.cached_audit`), every record on the live assignment-decision chain
(`assignment_decisions.audit_assignment_decisions`, LA §4.5.5), and the admission record of the
latest recovery release (its terminal blob loaded and matched). Any inconsistency raises before a
single delete. Then at most LEADER_LEASE_MAX_PRUNE_BATCHES batches of at most
LEADER_LEASE_PRUNE_BATCH_RECORDS records older than the grace, all below the snapshot head, are
deleted; then old release terminals (LA §4.8.3). The batches live in `prune_batches`.

Ages compare the local wall clock with the store's last_modified: the only safety use of wall
time, and a clock before 1970 fails closed (LA §4.8.4, LA §11.7) instead of disabling the grace.

`PruneScheduler` is the background half (LA §4.8.1): the authority's sync prune hook, at most one
prune at a time in a TaskGroup it owns, each under LEADER_LEASE_PRUNE_TIMEOUT_S, errors logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from laminar_cluster.authority.assignment_decisions import audit_assignment_decisions
from laminar_cluster.authority.outcome_audit import cached_audit
from laminar_cluster.authority.prune_batches import (
    delete_all,
    prune_records,
    prune_release_terminals,
    wall_now_ms,
)
from laminar_cluster.authority.recovery_terminal import admitted_terminal
from laminar_cluster.errors import CorruptRecord, DeadlineExceeded, InvalidArgument, Refused
from laminar_cluster.lease.limits import LEADER_LEASE_PRUNE_TIMEOUT_S
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord, RecoveryReleaseTerminalRef
from laminar_cluster.lease.term import ttl_ms_of

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

__all__ = [
    "PruneReport",
    "PruneScheduler",
    "RetainedSet",
    "delete_all",
    "grace_ms_for",
    "prune_history",
    "prune_records",
    "prune_release_terminals",
    "retained_set",
    "wall_now_ms",
]

_log: Final = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetainedSet:
    """What one prune run must not delete, computed from one snapshot of the head."""

    head_seq: int
    sequences: frozenset[int]
    release_terminal: RecoveryReleaseTerminalRef | None  # the latest release's terminal, kept


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one prune run did (for logs and tests)."""

    head_seq: int | None  # None: an empty namespace, nothing to do
    retained: frozenset[int]
    deleted_records: tuple[int, ...]
    deleted_terminals: tuple[str, ...]
    record_batches: int
    terminal_batches: int


def grace_ms_for(ttl_s: float) -> int:
    """LA §4.8.1: grace_ms = max(2 * ttl_ms, 1)."""
    return max(2 * ttl_ms_of(ttl_s), 1)


async def prune_history(
    authority: LeaderLeaseStore, grace_ms: int, *, deadline: float | None = None
) -> PruneReport:
    """Delete old history that no reader or stalled writer can still need (LA §4.8.2).

    Raises before any delete if the retained set cannot be proven (CorruptRecord; InventoryChanged
    when a chain record vanished mid-walk); StoreUnavailable when a delete fails or the bounded
    budget did not reach the end of the history; DeadlineExceeded after `deadline`.
    """
    if grace_ms < 0:
        raise InvalidArgument(f"history prune grace is {grace_ms} ms; it must be 0 or more")
    if deadline is None:
        return await _prune_history(authority, grace_ms)
    clock = authority.clock
    if clock.monotonic() >= deadline:
        raise DeadlineExceeded("leader authority history prune: deadline passed before start")
    try:
        async with clock.timeout_at(deadline):
            return await _prune_history(authority, grace_ms)
    except TimeoutError as error:
        raise DeadlineExceeded("leader authority history prune: deadline passed") from error


async def _prune_history(authority: LeaderLeaseStore, grace_ms: int) -> PruneReport:
    wall_now_ms(authority.clock)  # a wall clock before 1970 fails closed before any request
    head = await authority.load_record()
    if head is None:
        return PruneReport(None, frozenset(), (), (), 0, 0)
    # Everything that must survive is proven before the first delete: any inconsistency in a
    # live chain aborts the whole run (LA-13, LA-11).
    retained = await retained_set(authority, head)
    store, clock = authority.store, authority.clock
    deleted, record_batches = await prune_records(
        store, clock, retained.head_seq, retained.sequences, grace_ms
    )
    terminals: tuple[str, ...] = ()
    terminal_batches = 0
    if retained.release_terminal is not None:
        terminals, terminal_batches = await prune_release_terminals(
            store, clock, retained.release_terminal, grace_ms
        )
    return PruneReport(
        head_seq=retained.head_seq,
        retained=retained.sequences,
        deleted_records=deleted,
        deleted_terminals=terminals,
        record_batches=record_batches,
        terminal_batches=terminal_batches,
    )


async def retained_set(authority: LeaderLeaseStore, head: LeaderAuthorityRecord) -> RetainedSet:
    """LA §4.8.2 step 2: head, head-1, the live chains and the latest release admission."""
    head_seq = head.lease.seq
    # LA-2: the head and its predecessor survive every prune (a reader may hold the pointer one
    # record behind the head it is about to repair).
    sequences = {head_seq}
    if head_seq > 1:
        sequences.add(head_seq - 1)
    sequences |= await _live_outcome_sequences(authority, head)
    sequences |= await _live_assignment_sequences(authority, head)
    release = await _retained_release_admission(authority, head)
    if release is not None:
        sequences.add(release[0])
    return RetainedSet(
        head_seq=head_seq,
        sequences=frozenset(sequences),
        release_terminal=None if release is None else release[1],
    )


async def _live_outcome_sequences(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord
) -> set[int]:
    """Records of the live terminal chain (epoch >= authority_before) and the live Commit chain
    (epoch >= artifact_before), verified by the LA §4.4.3 audit (walks bounded by
    MAX_LIVE_AUTHORITY_LINKS, LA-21). Anchors are kept by value in the floor, not as records."""
    floor = head.outcome_floor
    if head.outcome_head is None and head.commit_head is None and floor is None:
        return set()  # no outcome history: no audit, no deployment identity needed
    head_key = record_path(head.lease.seq)
    try:
        # The LA §4.4.3 audit through the instance's cache: a snapshot cached for the same
        # (outcome head, Commit head, floor) names the same immutable chain records.
        snapshot = await cached_audit(authority, head)
    except Refused as error:  # a chain problem found while pruning is corruption (LA §7)
        raise CorruptRecord(
            f"{head_key}: retained outcome authority chain is inconsistent: {error}", key=head_key
        ) from error
    terminal_before = 0 if floor is None else floor.authority_before_epoch
    artifact_before = 0 if floor is None else floor.artifact_before_epoch
    live = {link.sequence for link in snapshot.terminal_links if link.epoch >= terminal_before}
    live |= {link.sequence for link in snapshot.commit_links if link.epoch >= artifact_before}
    _require_below_head(live, head, "outcome")
    return live


async def _live_assignment_sequences(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord
) -> set[int]:
    """Records of the live assignment-decision chain (target >= the floor), verified by the
    LA §4.5.5 audit; the anchor below the floor lives on by value."""
    floor = head.assignment_decision_floor
    if head.assignment_decision_head is None and floor is None:
        return set()
    head_key = record_path(head.lease.seq)
    try:
        decisions = await audit_assignment_decisions(authority, head)
    except Refused as error:
        raise CorruptRecord(
            f"{head_key}: retained assignment-decision authority chain is inconsistent: {error}",
            key=head_key,
        ) from error
    before = 0 if floor is None else floor.before_target_version
    live = {link.sequence for link, _ in decisions if link.target_version >= before}
    _require_below_head(live, head, "assignment-decision")
    return live


def _require_below_head(live: set[int], head: LeaderAuthorityRecord, chain: str) -> None:
    """A live link can only name the head or an older record (LA-2: nothing at or above the
    snapshot head is ever a candidate, and a link beyond it is corruption)."""
    beyond = sorted(seq for seq in live if seq == 0 or seq > head.lease.seq)
    if beyond:
        key = record_path(head.lease.seq)
        raise CorruptRecord(
            f"{key}: retained {chain} chain links to sequence {beyond[0]} beyond the head",
            key=key,
        )


async def _retained_release_admission(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord
) -> tuple[int, RecoveryReleaseTerminalRef] | None:
    """The latest release admission (sequence, terminal): it must carry the matching commit at
    exactly the link's sequence, and its blob must load and carry the commit's leader proof."""
    link = head.recovery_release_head
    if link is None:
        return None
    await admitted_terminal(authority, head, link)
    return link.sequence, link.terminal


class PruneScheduler:
    """Runs `prune_history` in the background after appends (LA §4.8.1, LA §6).

    Install it with `async with scheduler.running():`, which owns the TaskGroup and sets itself
    as `authority.prune_hook`. A hook call while not running, outside the group's event loop, or
    while a prune is already running is dropped (the next append asks again). Each prune runs
    under `timeout_s`; its errors are logged, never raised. Leaving the block cancels a prune in
    flight (deletes are idempotent and only of unretained records, so stopping midway is safe).
    """

    def __init__(
        self, authority: LeaderLeaseStore, *, timeout_s: float = LEADER_LEASE_PRUNE_TIMEOUT_S
    ) -> None:
        if not timeout_s > 0:
            raise InvalidArgument(f"history prune timeout is {timeout_s} s; it must be positive")
        self.authority = authority
        self.timeout_s = timeout_s
        self.started = 0  # prunes started
        self.dropped = 0  # requests dropped (not running, or a prune already running)
        self.failed = 0  # prunes that ended with an error or a timeout (logged)
        self.last_report: PruneReport | None = None
        self.last_error: Exception | None = None
        self._group: asyncio.TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[PruneScheduler]:
        if self._group is not None:
            raise InvalidArgument("this history prune scheduler is already running")
        previous = self.authority.prune_hook
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(asyncio.TaskGroup())
        self._loop = asyncio.get_running_loop()
        self.authority.prune_hook = self.request
        try:
            yield self
        finally:
            if self.authority.prune_hook == self.request:
                self.authority.prune_hook = previous
            self._group = self._loop = None
            if self._task is not None and not self._task.done():
                self._task.cancel()
            # The group is closed as if its body succeeded: our prune task never raises, so it
            # only waits for that task, and the body's own exception (or cancellation)
            # propagates as it was, not wrapped in an ExceptionGroup.
            await stack.aclose()

    def request(self) -> None:
        """The authority's prune hook (sync): start one prune now, or drop the request."""
        group = self._group
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: skipped (LA §4.8.1)
            loop = None
        busy = self._task is not None and not self._task.done()
        if group is None or loop is not self._loop or busy:
            self.dropped += 1
            return
        self._idle.clear()
        self.started += 1
        self._task = group.create_task(self._run())

    async def wait_idle(self) -> None:
        """Return once no prune is running."""
        await self._idle.wait()

    async def _run(self) -> None:
        clock = self.authority.clock
        try:
            grace_ms = grace_ms_for(self.authority.ttl_s)
            deadline = clock.monotonic() + self.timeout_s
            self.last_report = await prune_history(self.authority, grace_ms, deadline=deadline)
        except Exception as error:  # logged only (LA §4.8.1); CancelledError is not an Exception
            self.failed += 1
            self.last_error = error
            _log.warning("leader authority history prune failed: %s", error)
        finally:
            self._idle.set()
