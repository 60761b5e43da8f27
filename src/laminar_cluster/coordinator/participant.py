"""`CheckpointParticipant`: the participant side of the distributed checkpoint
(docs/protocols/distributed-checkpoint.md, participant steps P0-P6; DC §1.7).

Each `step()`:

* P0 (first step only): the restart scan (`attempts.newest_acked_attempt`, one listing). The
  newest attempt holding a manifest at this node's path, at or above the last Commit, is the
  attempt a previous boot may have staged output for and not resolved; it becomes pending and
  is resolved before any new cut (DC-9). The manifest plays the sink-open witness here: the
  decision store's witness is one slot per deployment, which N participants cannot share.
* P1: the pointer (`pointer.py`), one conditional GET: the newest prepare and its verdict (hints).
* P2: a pending attempt is settled first (`_decision`), from the authority: its outcome or a
  strictly newer one (`cluster_attempt_settlement`), or a newer prepare under a newer leader
  term, read back from its create-only `prepare.json`, which proves the old term can no longer
  append its outcome (DC-8). Commit only on a durable Commit (DC-6). The authority is read when
  the pointer moved (a verdict, a newer prepare) and otherwise on a backing-off timer.
* P3: the newest prepare is answered only if its fence is the host's running fence and names
  this exact process (node and boot); a prepare of an older leader term than one answered
  before is ignored.
* P4: `host.cut`, then one state object holding the slices of the vnodes that changed since
  this node's last committed cut (`stage`; an unchanged vnode is a reference, DC-16), create-only;
  a refused cut or a failed write resolves Abort at once (no manifest, so no Commit can include
  this node). A refusal is a LaminarError (logged at INFO); any other exception is a bug of the
  engine (or of this code): logged at ERROR with its traceback and counted (`engine_bugs`,
  `on_engine_bug`), and the attempt is still aborted.
* P5: the manifest, last, with the output and the SHA-256 of the prepare it answers; from its
  first write on, the attempt is pending.
* P6: wait for the decision until `decision_timeout_s`; then `host.resolve`. With no decision by
  then the attempt stays pending ("in doubt") and the host stays paused: resolving Abort while
  the leader can still record Commit would emit the attempt's output twice. A Commit makes the
  manifest's slices this node's baseline for the next cut's references.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from laminar_cluster.authority.cluster_outcomes import (
    cluster_attempt_settlement,
    highest_cluster_committed_outcome,
)
from laminar_cluster.checkpoint.records import CheckpointAttempt, CheckpointVerdict
from laminar_cluster.clock import Clock, first_of, within_deadline
from laminar_cluster.coordinator.attempts import newest_acked_attempt
from laminar_cluster.coordinator.host import CheckpointHost, Cut
from laminar_cluster.coordinator.objects import read_prepare
from laminar_cluster.coordinator.paths import manifest_path, state_path
from laminar_cluster.coordinator.pointer import PointerReader, PollSchedule
from laminar_cluster.coordinator.records import CheckpointPrepare, ParticipantManifest
from laminar_cluster.coordinator.slices import CommittedSlices
from laminar_cluster.coordinator.stage import create_ours, staged_manifest
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import ObjectStore

logger = logging.getLogger(__name__)

WAIT_POLLS_MAX: Final = 1_000_000  # the decision wait's count bound; its deadline ends it first
SETTLE_FIRST_S_MIN: Final = 1.0  # the authority is read this long after an ack at the latest
SETTLE_BACKOFF_S_MAX: Final = 8.0  # ... then doubling up to this, while the pointer is silent


@dataclass(frozen=True, slots=True)
class Idle:
    """No prepare to answer."""


@dataclass(frozen=True, slots=True)
class Ignored:
    attempt: CheckpointAttempt
    reason: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The cut or its writes failed before the manifest: resolved as Abort at once."""

    attempt: CheckpointAttempt
    error: str


@dataclass(frozen=True, slots=True)
class Resolved:
    attempt: CheckpointAttempt
    committed: bool


@dataclass(frozen=True, slots=True)
class InDoubt:
    """Acked, no decision yet: the host stays paused; later steps keep waiting."""

    attempt: CheckpointAttempt


StepOutcome = Idle | Ignored | Refused | Resolved | InDoubt


@dataclass
class _Pending:
    prepare: CheckpointPrepare
    manifest: ParticipantManifest | None = None  # ours (None: a previous boot's, DC-9)
    decided: bool | None = None  # known decision not yet delivered to the host
    settle_at_s: float = 0.0  # when the authority is read at the latest
    settle_backoff_s: float = SETTLE_FIRST_S_MIN
    checked: int = 0  # the pointer change the last authority read followed


class CheckpointParticipant:
    """Answers the prepares of the fence its host runs (module docstring). `interval_s` is the
    configured checkpoint interval: the pointer is polled around the expected prepares and
    quietly in between (`pointer.PollSchedule`); None polls it every `poll_s`.
    `members_version`: the node's membership view version; a change of it or of the running
    fence makes the pointer polls short for a while (`PollSchedule.hurry`, DC-18)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        authority: LeaderLeaseStore,
        host: CheckpointHost,
        poll_s: float,
        *,
        interval_s: float | None = None,
        prepare_timeout_s: float = 10.0,
        decision_timeout_s: float = 30.0,
        on_engine_bug: Callable[[], None] | None = None,
        members_version: Callable[[], int] | None = None,
    ) -> None:
        if poll_s <= 0 or prepare_timeout_s <= 0 or decision_timeout_s <= 0:
            raise InvalidArgument("poll_s and the timeouts must be > 0")
        if interval_s is not None and not interval_s > 0:
            raise InvalidArgument(f"interval_s must be > 0, not {interval_s!r}")
        self.store = store
        self.clock = clock
        self.authority = authority
        self.host = host
        self.poll_s = poll_s
        self.prepare_timeout_s = prepare_timeout_s
        self.decision_timeout_s = decision_timeout_s
        self.errors = 0
        self.last_error: str | None = None
        self.engine_bugs = 0  # cuts that failed with an exception that is not a LaminarError
        self.pointer = PointerReader(store)
        self.schedule = PollSchedule.for_interval(poll_s, interval_s)
        self._woken = asyncio.Event()  # `wake`: poll now
        self._on_engine_bug = on_engine_bug
        self._members_version = members_version
        self._cluster_seen: object = None  # the running fence and membership version last seen
        self._scanned = False
        self._newest: CheckpointPrepare | None = None  # the newest prepare the pointer showed
        self._fresh = False  # `_newest` was first shown in this step
        self._handled = 0  # the newest attempt cut (or refused)
        self._max_token = 0  # the newest leader term of an answered prepare
        self._pending: _Pending | None = None
        self._baseline: CommittedSlices | None = None  # DC-16: our last committed slices
        self._confirmed: dict[int, bool] = {}  # DC-8: newer-term prepares read back

    @property
    def pending(self) -> CheckpointAttempt | None:
        return None if self._pending is None else self._pending.prepare.attempt

    async def run(self, shutdown: asyncio.Event) -> None:
        """Step until `shutdown`, waiting for the next pointer poll whenever there was nothing
        to do."""
        while not shutdown.is_set():
            outcome: StepOutcome = Idle()
            try:
                outcome = await self.step()
            except LaminarError as error:
                self.errors += 1
                self.last_error = str(error)
                logger.warning("checkpoint participant step failed: %s", error)
            if isinstance(outcome, Idle | Ignored | InDoubt) and await self._sleep(shutdown):
                return

    async def step(self) -> StepOutcome:
        # P4 (cut and writes), P6 (decision wait) and the host's resolve, each within its own
        # timeout; the pointer read and the scan share the remainder.
        deadline = self.clock.monotonic() + 3 * self.prepare_timeout_s + self.decision_timeout_s
        async with within_deadline(self.clock, deadline, "checkpoint participant step"):
            if not self._scanned:
                await self._restart_scan()  # P0
                self._scanned = True
            await self._discover()  # P1
            if self._pending is not None:  # P2
                settled = await self._wait(self.clock.monotonic() + self.decision_timeout_s)
                if settled is not None:
                    return settled
                return InDoubt(self._pending.prepare.attempt)
            return await self._consider()

    # -- P0, P1 ----------------------------------------------------------------------------------
    async def _restart_scan(self) -> None:
        """DC-9: the newest attempt (at or above the last Commit) with this node's manifest, found
        by one listing of the attempt keys from the last Commit on."""
        node_id = self.host.local_participant().node_id
        committed = await highest_cluster_committed_outcome(self.authority)
        start = None if committed is None else committed.checkpoint_id
        ours = await newest_acked_attempt(self.store, node_id, start)
        if ours is None:
            return
        prepare = await read_prepare(self.store, ours)
        if prepare is None:
            raise CorruptRecord(f"attempt {ours} holds a manifest of node {node_id} but no prepare")
        self._pending = _Pending(prepare, settle_at_s=self.clock.monotonic())
        self._handled = ours
        self._max_token = prepare.leader_proof.fencing_token
        logger.info("resolving attempt %d acked by a previous boot of node %d", ours, node_id)

    async def _discover(self) -> None:
        """One pointer poll: a newer prepare becomes `_newest` (fresh)."""
        self._fresh = False
        self._note_cluster()
        if not await self.pointer.poll():
            return
        pointer = self.pointer.last
        assert pointer is not None  # a poll that saw a change read one
        newest, prepare = self._newest, pointer.prepare
        if newest is None or prepare.attempt.checkpoint_id > newest.attempt.checkpoint_id:
            self._newest, self._fresh = prepare, True
            logger.info("attempt %d: prepare seen", prepare.attempt.checkpoint_id)
            periodic = prepare.drain_transition is None
            self.schedule.prepare_seen(self.clock.monotonic(), periodic=periodic)
        if self._verdict_hint() is not None and self._pending is None:
            self.schedule.settled()
        if self._verdict_hint() is not None and pointer.next_in_ms is not None:
            self.schedule.expect(self.clock.monotonic() + pointer.next_in_ms / 1000)

    def _note_cluster(self) -> None:
        """A new running fence or membership version (or our start): hurry the polls (DC-18)."""
        version = None if self._members_version is None else self._members_version()
        seen = (self.host.running_fence(), version)
        if seen != self._cluster_seen:
            self._cluster_seen = seen
            self.schedule.hurry(self.clock.monotonic())

    def _verdict_hint(self) -> CheckpointVerdict | None:
        """The pointer's verdict for `_newest` (None: none shown)."""
        pointer, newest = self.pointer.last, self._newest
        if pointer is None or newest is None or pointer.prepare.attempt != newest.attempt:
            return None
        return pointer.verdict

    # -- P2, P6 ----------------------------------------------------------------------------------
    async def _wait(self, until: float) -> Resolved | None:
        """Wait for the pending attempt's decision until `until`; resolve it once known."""
        pending = self._pending
        assert pending is not None
        for poll in range(WAIT_POLLS_MAX):
            if pending.decided is None:
                if poll:
                    await self._discover()
                if self._decision_due(pending):
                    pending.decided = await self._decision(pending.prepare)
            if pending.decided is not None:
                return await self._resolve(pending, pending.decided)
            now_s = self.clock.monotonic()
            remaining_s = until - now_s
            if remaining_s <= 0:
                return None
            wait_s = min(self.schedule.next_delay(now_s), max(0.0, pending.settle_at_s - now_s))
            await self.clock.sleep(min(max(wait_s, 1e-3), remaining_s))
        return None

    def _decision_due(self, pending: _Pending) -> bool:
        """Read the authority now? When the pointer changed since the last read (a verdict, a
        newer prepare), or the backing-off timer is due."""
        changes = self.pointer.changes
        moved = changes != pending.checked
        now_s = self.clock.monotonic()
        if not moved and now_s < pending.settle_at_s:
            return False
        pending.checked = changes
        if not moved:
            pending.settle_backoff_s = min(2 * pending.settle_backoff_s, SETTLE_BACKOFF_S_MAX)
        pending.settle_at_s = now_s + pending.settle_backoff_s
        return True

    async def _decision(self, prepare: CheckpointPrepare) -> bool | None:
        """True: committed; False: can never commit (DC-8); None: not known yet."""
        attempt = prepare.attempt
        newest = self._newest
        newer_term = (
            newest is not None
            and newest.attempt.checkpoint_id > attempt.checkpoint_id
            and newest.leader_proof.fencing_token > prepare.leader_proof.fencing_token
            and await self._durable(newest)
        )
        settlement = await cluster_attempt_settlement(self.authority, attempt)
        if settlement is not None:
            return settlement.epoch == attempt.epoch and settlement.is_commit()  # DC-6
        if newer_term:
            # DC-8: a newer term's prepare is durable, so the old term can append no outcome
            # any more; any Commit it did append would have shown in the settlement read above,
            # made after that prepare was read back.
            return False
        return None

    async def _durable(self, prepare: CheckpointPrepare) -> bool:
        """The pointer's prepare is the create-only `prepare.json` (read once per attempt)."""
        checkpoint_id = prepare.attempt.checkpoint_id
        known = self._confirmed.get(checkpoint_id)
        if known is None:
            known = await read_prepare(self.store, checkpoint_id) == prepare
            self._confirmed = {checkpoint_id: known}
        return known

    async def _resolve(self, pending: _Pending, committed: bool) -> Resolved:
        attempt = pending.prepare.attempt
        deadline = self.clock.monotonic() + self.prepare_timeout_s
        await self.host.resolve(attempt, committed, deadline=deadline)
        self._pending = None
        if committed and pending.manifest is not None:  # DC-16: the next cut's baseline
            fence = pending.prepare.fence
            self._baseline = CommittedSlices.of(attempt.checkpoint_id, fence, [pending.manifest])
        if self._verdict_hint() is not None:
            self.schedule.settled()
        logger.info("attempt %d resolved: %s", attempt.epoch, "commit" if committed else "abort")
        return Resolved(attempt, committed)

    # -- P3-P5 -----------------------------------------------------------------------------------
    async def _consider(self) -> StepOutcome:
        prepare = self._newest
        if prepare is None or prepare.attempt.checkpoint_id <= self._handled:
            return Idle()
        attempt = prepare.attempt
        reason = self._mismatch(prepare)
        if reason is not None:
            return Ignored(attempt, reason)  # re-checked each step: the host may adopt it
        if prepare.leader_proof.fencing_token < self._max_token:
            self._handled = attempt.checkpoint_id
            return Ignored(attempt, "the prepare is from an older leader term")
        if self._verdict_hint() is not None or (
            not self._fresh
            and await cluster_attempt_settlement(self.authority, attempt) is not None
        ):
            self._handled = attempt.checkpoint_id
            return Ignored(attempt, "the attempt is already decided")
        return await self._answer(prepare)

    def _mismatch(self, prepare: CheckpointPrepare) -> str | None:
        me = self.host.local_participant()
        if prepare.fence.participant_incarnation(me.node_id) != me.boot_incarnation:
            return f"the fence does not name node {me.node_id} boot {me.boot_incarnation}"
        if self.host.running_fence() != prepare.fence:
            return f"the host does not run fence v{prepare.fence.assignment_version}"
        return None

    async def _answer(self, prepare: CheckpointPrepare) -> StepOutcome:
        attempt = prepare.attempt
        self._handled = attempt.checkpoint_id
        self._max_token = max(self._max_token, prepare.leader_proof.fencing_token)
        seen_s = self.clock.monotonic()
        deadline = seen_s + self.prepare_timeout_s
        try:
            async with within_deadline(self.clock, deadline, f"cut of attempt {attempt.epoch}"):
                cut = await self.host.cut(prepare, deadline=deadline)
            cut_s = self.clock.monotonic()
            manifest, body = await self._write_cut(prepare, cut, deadline=deadline)
            logger.info(
                "attempt %d: cut in %.3f s, state written in %.3f s",
                attempt.checkpoint_id,
                cut_s - seen_s,
                self.clock.monotonic() - cut_s,
            )
        except Exception as error:  # the host's refusal, a failed write, or a bug
            # No manifest of ours exists, so no Commit can include us: Abort is safe now (and
            # retried by later steps if the host fails to resume).
            self._note_refusal(attempt, error)
            self._pending = _Pending(prepare, decided=False)
            await self._resolve(self._pending, False)
            return Refused(attempt, str(error))
        now_s, me = self.clock.monotonic(), manifest.participant
        settle_s = max(SETTLE_FIRST_S_MIN, 10 * self.poll_s)
        # Pending from the first manifest write on (P5).
        self._pending = _Pending(
            prepare,
            manifest,
            settle_at_s=now_s + settle_s,
            settle_backoff_s=settle_s,
            checked=self.pointer.changes,
        )
        try:
            key = manifest_path(attempt.checkpoint_id, me.node_id)
            await create_ours(self.store, self.clock, key, body, deadline=deadline)
        except LaminarError as error:  # it may have landed: the decision settles it
            logger.warning("attempt %d: manifest write failed: %s", attempt.epoch, error)
        settled = await self._wait(self.clock.monotonic() + self.decision_timeout_s)
        return InDoubt(attempt) if settled is None else settled

    def _note_refusal(self, attempt: CheckpointAttempt, error: Exception) -> None:
        """A LaminarError is the host's refusal or a failed write; anything else is a bug."""
        if isinstance(error, LaminarError):
            logger.info("attempt %d refused: %s", attempt.epoch, error)
            return
        self.engine_bugs += 1
        logger.error(
            "attempt %d: the cut failed with a bug; aborting it", attempt.epoch, exc_info=error
        )
        if self._on_engine_bug is not None:
            self._on_engine_bug()

    async def _write_cut(
        self, prepare: CheckpointPrepare, cut: Cut, *, deadline: float
    ) -> tuple[ParticipantManifest, bytes]:
        """P4: the state object (none when every slice is a reference or empty); the manifest
        to write next and its bytes (encoded within its limit before the state is written)."""
        me = self.host.local_participant()
        staged, manifest, body = staged_manifest(prepare, me, cut, self._baseline)
        if staged.state:
            key = state_path(prepare.attempt.checkpoint_id, me.node_id)
            await create_ours(self.store, self.clock, key, staged.state, deadline=deadline)
        return manifest, body

    def wake(self) -> None:
        """Poll the pointer now (this process's leader just wrote it): the leader's own
        participant need not wait for its schedule (DC-18)."""
        self._woken.set()

    async def _sleep(self, shutdown: asyncio.Event) -> bool:
        """Wait until the next pointer poll or a `wake`; True on shutdown."""
        delay_s = self.schedule.next_delay(self.clock.monotonic())
        try:
            async with self.clock.timeout_at(self.clock.monotonic() + delay_s):
                await first_of(shutdown, self._woken)
        except TimeoutError:
            pass
        self._woken.clear()
        return shutdown.is_set()
