"""The snapshot watcher: every node's follower side of the rebalance plane (RB §1.1
"followers", RB §4.11; RB-11, RB-12, RB-18).

Each `watcher_poll` the watcher reads the durable head and, depending on what it finds (the
head comes through the snapshot store's head hint, AS §2.14: one conditional GET while it is
unchanged, the inventory when it moved, after a failed head load and every
`HEAD_FULL_READ_TICKS`-th tick; the audit of an unchanged, already adopted head is the last
tick's, `_audit`):

* A: a draining successor of the local version: audit it, install its transition, stop local
  sources at one cut and write the durable ack (a target-only joiner only notes it);
* B: a committed successor: adopt it (a recovery generation through the recovery path:
  a participant suspends, faults and restores cold; an ownerless process only follows);
* C: the local version (or older): keep it cached;
* D: no head: nothing is cached;
* E: the head cannot be read: fail closed.

Before the branches, a committed head whose drain terminal concerns this process settles the
local source drain (RB §4.13, `watcher_settle`). After them, `publish_authority` (RB §4.12,
`watcher_publish`) re-publishes the vnode-state report and, when every participant adopted
exactly the cached map, the owner certificate. Any failed audit or read suspends authority
("Suspend": dirty, then `suspend_local_assignment_authority`), and intake stays closed until a
later tick re-certifies (RB-12).

Coordinated-recovery Release (our stand-in, outside the spec's watcher): the coordinated
recovery protocol is out of scope (RB §0), so after a successful recovery adoption on a
PARTICIPANT, which restored this process cold from the audited recovery checkpoint, the watcher
clears the controller's recovering flag (`set_recovering(False)`) instead of re-publishing a
fault for the engine's `recovery_required`; the next publication may then reopen intake.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from laminar_cluster.assignment.digest import drain_id
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import LaminarError
from laminar_cluster.rebalance.audit.binding import RecoveryScope, local_recovery_assignment_scope
from laminar_cluster.rebalance.audit.drain import audit_drain_predecessor, local_drain_participant
from laminar_cluster.rebalance.audit.generation import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.results import AuditedAssignmentAuthority, AuditedDrainOutcome
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.gates import (
    ensure_local_recovery_fault,
    suspend_local_assignment_authority,
    suspend_recovery_assignment_authority,
)
from laminar_cluster.rebalance.interfaces import Adoption, SourceDrainOutcome
from laminar_cluster.rebalance.recovery.recover import (
    prepare_watched_recovery_adoption,
    release_after_recovery_adoption,
)
from laminar_cluster.rebalance.refusals import Refusal, refused_because
from laminar_cluster.rebalance.rotation.graceful import prepare_and_announce_local_drain
from laminar_cluster.rebalance.watcher.publish import PlacementSink, publish_authority
from laminar_cluster.rebalance.watcher.settle import (
    STEP_FAILURES,
    ensure_current_assignment_authority_cached,
    install_checkpoint_drain_transition,
    settle_terminal_drain,
)
from laminar_cluster.rebalance.watcher.state import WatcherState

logger: Final = logging.getLogger(__name__)
# A suspension whose tick deadline already passed still gets this long for its lock wait.
_SUSPEND_GRACE_S: Final = 1.0
# Every this many ticks the head is loaded in full (the inventory LIST) whatever its hint says,
# and an adopted head is audited again: a head whose writer died before publishing its hint
# is seen at most this many ticks late (AS §2.14), and a late doubt about an adopted head too.
HEAD_FULL_READ_TICKS: Final = 30


class SnapshotWatcher(WatcherState):
    """One process's watcher. The RB §4.11 state fields are attributes (see `WatcherState`)."""

    def __init__(self, ctx: RebalanceContext, metrics: PlacementSink | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.metrics = metrics
        self.ticks = 0  # completed or abandoned ticks, for tests and metrics
        self._reread = False  # the next tick re-reads the head in full (`reread`)

    # -- the loop ----------------------------------------------------------------------------
    async def run(self, shutdown: asyncio.Event) -> None:
        """Tick every `watcher_poll`: the first tick at once, missed ticks skipped (no burst),
        shutdown first at every wait and abandoning a tick in flight (RB §4.1 asyncio notes)."""
        clock = self.ctx.clock
        period = self.ctx.config.watcher_poll_s
        next_tick = clock.monotonic()
        while not shutdown.is_set():
            if clock.monotonic() < next_tick:
                try:
                    async with clock.timeout_at(next_tick):
                        await shutdown.wait()
                    return
                except TimeoutError:
                    pass
            if shutdown.is_set():
                return
            await self._tick_until_shutdown(shutdown)
            now = clock.monotonic()
            next_tick += period
            if next_tick <= now:  # skip the ticks this one overran
                next_tick += ((now - next_tick) // period + 1) * period

    async def _tick_until_shutdown(self, shutdown: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            tick = group.create_task(self._guarded_tick())
            stop = group.create_task(shutdown.wait())
            await asyncio.wait({tick, stop}, return_when=asyncio.FIRST_COMPLETED)
            tick.cancel()
            stop.cancel()

    def reread(self) -> None:
        """Make the next tick the periodic full re-read (a failed head load does too): the
        head through the inventory, its objects verified again, its audit run again."""
        self._reread = True

    async def _guarded_tick(self) -> None:
        try:
            await self.tick()
        except STEP_FAILURES as error:
            self.dirty = True
            logger.warning("snapshot watcher tick failed: %s", error)

    # -- one tick (RB §4.11) --------------------------------------------------------------------
    async def tick(self) -> None:
        ctx = self.ctx
        engine = ctx.engine
        self.ticks += 1
        local = engine.registry().version
        head_deadline = ctx.head_deadline()
        revision = engine.authority_revision()
        full = self._reread or self.ticks % HEAD_FULL_READ_TICKS == 0
        self._reread = False
        try:
            async with within_deadline(ctx.clock, head_deadline, "assignment head load"):
                head = await ctx.snapshots.load_watched(full=full)
        except STEP_FAILURES as error:  # E
            self._reread = True
            self.clear_caches()
            await self._suspend(head_deadline, f"assignment head unreadable: {error}")
            await self.publish_authority(revision)
            return
        outcome: AuditedAssignmentAuthority | None = None
        if head is not None and not head.draining:
            try:
                outcome = await self._audit(head, head_deadline, reuse=not full)
            except STEP_FAILURES as error:
                await self._suspend(
                    head_deadline, f"assignment {head.assignment_version} audit failed: {error}"
                )
                return
            await self._drop_drain_superseded_by_recovery(head, outcome, head_deadline)
            proceed, revision = await self.settle_terminal_drain(
                head, outcome.terminal, head_deadline, revision
            )
            if not proceed:
                return
        if head is None:  # D
            self.clear_caches()
        elif head.assignment_version <= local:  # C
            self.cache(head, head.drain_transition)
        elif head.draining:  # A
            if not await self._draining_successor(head, head_deadline):
                return
        else:  # B
            assert outcome is not None
            continued = await self._committed_successor(head, outcome, head_deadline, revision)
            if continued is None:
                return
            revision = continued
        await self.publish_authority(revision)

    async def _audit(
        self, head: AssignmentSnapshot, deadline: float, *, reuse: bool
    ) -> AuditedAssignmentAuthority:
        """`audit_snapshot_authority_outcome` of the committed `head`, or, when `reuse`, the
        last tick's audit of the same head once this process runs it (branch C): the audit's
        inputs are create-only records (the head, its predecessor, the authority's decision
        for it), so its verdict on an adopted head stands until the head moves. A head not yet
        adopted is audited every tick, and every head on the periodic full re-read."""
        known = self.audited
        if (
            reuse
            and known is not None
            and known[0] == head
            and head.assignment_version <= self.ctx.engine.registry().version
        ):
            return known[1]
        self.audited = None
        outcome = await audit_snapshot_authority_outcome(self.ctx, head, deadline=deadline)
        self.audited = (head, outcome)
        return outcome

    async def _draining_successor(self, head: AssignmentSnapshot, head_deadline: float) -> bool:
        """Branch A; False ends the tick without publication."""
        ctx = self.ctx
        transition = head.drain_transition
        assert transition is not None
        version = head.assignment_version
        try:
            async with within_deadline(ctx.clock, head_deadline, "draining head audit"):
                predecessor = await audit_drain_predecessor(ctx, head)
        except STEP_FAILURES as error:
            self.clear_caches()
            await self._suspend(head_deadline, f"draining assignment {version} refused: {error}")
            return True
        try:
            predecessor = await install_checkpoint_drain_transition(
                ctx, head, transition, predecessor, deadline=head_deadline
            )
        except STEP_FAILURES as error:
            self.clear_caches()
            await self._suspend(
                head_deadline, f"draining assignment {version} transition not installed: {error}"
            )
            return False
        self.cache(predecessor, transition)
        if version == self.last_drained:
            return True
        try:
            ctx.engine.validate_source_drain_snapshot(head)
        except STEP_FAILURES as error:
            logger.warning("draining assignment %d: source drain refused: %s", version, error)
            return True
        participant = local_drain_participant(ctx, transition)
        if participant is None:  # a target-only joiner is never in the ack quorum
            self.last_drained = version
            return False
        self.active_local_drain = transition
        deadline = min(head_deadline, ctx.deadline_in(ctx.config.drain_ack_timeout_s))
        try:
            await prepare_and_announce_local_drain(
                ctx, head, transition, participant, deadline=deadline
            )
        except STEP_FAILURES as error:
            logger.warning("draining assignment %d: ack failed; retrying: %s", version, error)
            return False
        self.last_drained = version  # the next tick re-certifies from scratch
        return False

    async def _committed_successor(
        self,
        head: AssignmentSnapshot,
        outcome: AuditedAssignmentAuthority,
        head_deadline: float,
        revision: int,
    ) -> int | None:
        """Branch B; the revision publication continues with, or None to end the tick."""
        ctx = self.ctx
        engine = ctx.engine
        if head.assignment_version <= engine.registry().version:
            # Adopted since this tick read the local version (the leader's own recovery
            # materialization, say): branch C. Preparing it now would fault a process that
            # already restored, and nothing would release it (seed 502).
            self.cache(head)
            return revision
        scope: RecoveryScope | None = None
        if outcome.is_recovery:
            try:
                scope = local_recovery_assignment_scope(head, ctx.me)
            except STEP_FAILURES as error:
                await self._suspend(head_deadline, f"recovery assignment refused: {error}")
                return None
            if scope is RecoveryScope.PARTICIPANT:
                prepared = await self._prepare_participant_recovery(head, outcome, head_deadline)
                if prepared is None:
                    return None
                revision = prepared
        if head.assignment_version <= engine.registry().version:
            # Adopted meanwhile by this process's own leader materialization (a tick begun on
            # the predecessor): it restored cold and released, and the preparation above marked
            # the process recovering again. Release once more, or every graceful rotation this
            # leader opens is deferred for good.
            self.cache(head)
            if scope is RecoveryScope.PARTICIPANT:
                release_after_recovery_adoption(ctx, scope)
            return revision
        try:
            adoption = await self._adopt(head, outcome, scope, head_deadline)
        except STEP_FAILURES as error:
            return await self._adoption_failed(head, outcome, error, revision)
        self.cache(head)
        revision = engine.authority_revision()
        if scope is RecoveryScope.PARTICIPANT:
            release_after_recovery_adoption(ctx, scope)  # restored cold (module doc)
            return revision
        if adoption.recovery_required:
            self.installed_fence = None
            self.dirty = True
            await self._fault_if_participant(head)
            return None
        return revision

    async def _adoption_failed(
        self,
        head: AssignmentSnapshot,
        outcome: AuditedAssignmentAuthority,
        error: LaminarError | ShapeViolation,
        revision: int,
    ) -> int | None:
        """An adoption that failed: a shuffle not ready keeps the predecessor (re-audited)."""
        if not refused_because(error, Refusal.SHUFFLE_NOT_READY):
            _log_adoption_failure(head.assignment_version, error)
            return revision
        logger.info(
            "assignment %d: shuffle not ready; keeping the predecessor: %s",
            head.assignment_version,
            error,
        )
        try:
            await self.ensure_current_assignment_authority_cached(outcome)
        except STEP_FAILURES as cache_error:
            logger.warning("predecessor authority not re-audited: %s", cache_error)
            return None
        return revision

    async def _adopt(
        self,
        head: AssignmentSnapshot,
        outcome: AuditedAssignmentAuthority,
        scope: RecoveryScope | None,
        head_deadline: float,
    ) -> Adoption:
        engine = self.ctx.engine
        if outcome.recovery is None:
            return await engine.adopt_assignment(head, deadline=head_deadline)
        cut = outcome.recovery.restore_cut if scope is RecoveryScope.PARTICIPANT else None
        return await engine.adopt_recovery_assignment(head, cut, deadline=self.ctx.head_deadline())

    async def _prepare_participant_recovery(
        self,
        head: AssignmentSnapshot,
        outcome: AuditedAssignmentAuthority,
        head_deadline: float,
    ) -> int | None:
        """Branch B for a recovery participant: suspend, fault, settle, cold-bootstrap check;
        the engine's authority revision, or None when a step failed."""
        ctx = self.ctx
        try:
            await suspend_recovery_assignment_authority(ctx, deadline=head_deadline)
        except STEP_FAILURES as error:
            self.dirty = True
            logger.warning("recovery assignment: suspension failed: %s", error)
            return None
        self.clear_caches()
        self.installed_fence = None
        try:
            revision = await prepare_watched_recovery_adoption(
                ctx, head, outcome, deadline=ctx.head_deadline()
            )
        except STEP_FAILURES as error:
            self.dirty = True
            logger.warning("recovery assignment: adoption not prepared: %s", error)
            return None
        self.dirty = True
        return revision

    async def _fault_if_participant(self, head: AssignmentSnapshot) -> None:
        ctx = self.ctx
        try:
            scope = local_recovery_assignment_scope(head, ctx.me)
        except STEP_FAILURES:
            scope = RecoveryScope.PARTICIPANT  # doubt: fault (fail closed)
        if scope is not RecoveryScope.PARTICIPANT:
            return
        try:
            await ensure_local_recovery_fault(ctx, deadline=ctx.head_deadline())
        except STEP_FAILURES as error:
            logger.warning("local recovery fault not published: %s", error)

    async def _suspend(self, head_deadline: float, reason: str) -> None:
        """Suspend (RB §4.11): dirty, then suspend authority; failures are only logged."""
        self.dirty = True
        deadline = max(head_deadline, self.ctx.deadline_in(_SUSPEND_GRACE_S))
        try:
            await suspend_local_assignment_authority(self.ctx, deadline=deadline)
        except STEP_FAILURES as error:
            logger.warning("assignment authority suspension incomplete: %s", error)
        logger.warning("assignment authority suspended: %s", reason)

    # -- the RB §4.11-§4.13 helpers, bound to this watcher's state (the rest are the module
    # functions of `watcher_settle`: hold_terminal_source_resolution, settle_observed_local_drain,
    # install_checkpoint_drain_transition) -----------------------------------------------------
    async def publish_authority(self, revision: int) -> None:
        await publish_authority(
            self.ctx,
            self,
            revision,
            timeout_s=self.ctx.config.checkpoint_timeout_s,
            metrics=self.metrics,
        )

    async def _drop_drain_superseded_by_recovery(
        self,
        head: AssignmentSnapshot,
        outcome: AuditedAssignmentAuthority,
        deadline: float,
    ) -> None:
        """A recovery generation above the target of the drain this process acked makes that
        drain moot: recovery restores every owned vnode cold from its checkpoint, whatever the
        drain's verdict was. Its sources are released (Abort; nothing is left to release when
        this process already settled it as Commit) and the drain forgotten, instead of settling
        it through an edge that recovery's prune may already have removed (the predecessor of
        its terminal), which would wedge this follower below the head.

        The drain is the one this watcher acked or, when it acked none, the one the engine
        still holds open: a leader's own rotation prepares its local drain itself, and a
        leader deposed before its watcher acked, whose successor settled the drain and
        recovered above it before this watcher saw the terminal, would otherwise keep its
        sources stopped for it and refuse to prepare every later drain (simulation seed
        80914)."""
        transition = self.active_local_drain or self.ctx.engine.open_source_drain()
        if (
            transition is None
            or not outcome.is_recovery
            or head.assignment_version <= transition.target.assignment_version
        ):
            return
        round_id = drain_id(transition)
        engine = self.ctx.engine
        # Settled as Commit here before the prune cut its edge: nothing is left to release
        # (the recovery adoption restores every owned vnode cold either way).
        if not engine.owned_source_drain_resolved(round_id, SourceDrainOutcome.COMMIT):
            try:
                await engine.resolve_local_source_drain(
                    round_id, SourceDrainOutcome.ABORT, deadline=deadline
                )
            except STEP_FAILURES as error:
                logger.warning("drain %s: release before recovery failed: %s", round_id, error)
                return
        logger.info(
            "drain %s superseded by recovery assignment %d", round_id, head.assignment_version
        )
        self.clear_active_drain()

    async def settle_terminal_drain(
        self,
        snapshot: AssignmentSnapshot,
        audited_terminal: AuditedDrainOutcome | None,
        deadline: float,
        revision: int,
    ) -> tuple[bool, int]:
        return await settle_terminal_drain(
            self.ctx, self, snapshot, audited_terminal, deadline=deadline, revision=revision
        )

    async def ensure_current_assignment_authority_cached(
        self, audited_successor: AuditedAssignmentAuthority
    ) -> None:
        """With a fresh `checkpoint_timeout` (RB §4.19)."""
        await ensure_current_assignment_authority_cached(
            self.ctx, self, audited_successor, deadline=self.ctx.head_deadline()
        )


def _log_adoption_failure(version: int, error: Exception) -> None:
    """An assignment naming an earlier boot of this node (Refusal.ANOTHER_BOOT) is routine
    after a restart (INFO, the leader's recovery assignment follows); any other adoption
    failure is a WARNING."""
    if refused_because(error, Refusal.ANOTHER_BOOT):
        logger.info("%s (an earlier boot of this node); waiting for the recovery", error)
    else:
        logger.warning("assignment %d: adoption failed: %s", version, error)
