"""`CheckpointParticipant`: the participant side of the distributed checkpoint
(docs/protocols/distributed-checkpoint.md, participant steps P0-P6; DC §1.7).

Each `step()`:

* P0 (first step only): the restart scan. The newest attempt, at or above the highest committed
  one, holding a manifest at this node's path is the attempt a previous boot of this node may
  have staged output for and not resolved; it becomes pending and is resolved before any new
  cut (DC-9). The manifest plays the sink-open witness here: the decision store's witness is one
  slot per deployment ("at most one open witness"), which N participants cannot share.
* P1: newer attempts, by listing past a cursor (`attempts`); the newest prepare is kept.
* P2: a pending attempt is settled first (`_decision`): its outcome or a strictly newer one
  (`cluster_attempt_settlement`), or a newer prepare under a newer leader term, which proves the
  old term can no longer append its outcome (DC-8). Commit only on a durable Commit (DC-6).
* P3: the newest prepare is answered only if its fence is the host's running fence and names
  this exact process (node and boot); a prepare of an older leader term than one answered
  before is ignored.
* P4: `host.cut`, then the partials of exactly the cut's vnodes and the output, create-only (an
  identical object is fine: retries are idempotent); a refused cut or a failed write resolves
  Abort at once (no manifest, so no Commit can include this node). A refusal is a LaminarError
  (logged at INFO); any other exception is a bug of the engine (or of this code): logged at
  ERROR with its traceback and counted (`engine_bugs`, and `on_engine_bug` for the node's
  metrics), and the attempt is still aborted.
* P5: the manifest, last; from its first write on, the attempt is pending.
* P6: wait for the decision until `decision_timeout_s`; then `host.resolve`. With no decision by
  then the attempt stays pending ("in doubt") and the host stays paused: resolving Abort while
  the leader can still record Commit would emit the attempt's output twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from laminar_cluster.authority.cluster_outcomes import (
    cluster_attempt_settlement,
    highest_cluster_committed_outcome,
)
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import Clock, retry_until, within_deadline
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.attempts import attempts_after, newest_attempt
from laminar_cluster.coordinator.host import CheckpointHost, Cut
from laminar_cluster.coordinator.objects import (
    EMPTY_PARTIAL_SHA256,
    RECORD_VERSION,
    encode_record,
    gather_bounded,
    is_empty_cut,
    output_of,
    partial_of,
    read_prepare,
)
from laminar_cluster.coordinator.paths import manifest_path, output_path, partial_path
from laminar_cluster.coordinator.records import CheckpointPrepare, ParticipantManifest
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError, ObjectNotFound
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import CREATE, ObjectStore, put_resolved

logger = logging.getLogger(__name__)

SCAN_ATTEMPTS_MAX: Final = 4_096  # attempts one listing pass (or the restart scan) walks
WAIT_POLLS_MAX: Final = 1_000_000  # the decision wait's count bound; its deadline ends it first
PUT_ATTEMPTS_MAX: Final = 3


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
    decided: bool | None = None  # known decision not yet delivered to the host


class CheckpointParticipant:
    """Answers the prepares of the fence its host runs (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        authority: LeaderLeaseStore,
        host: CheckpointHost,
        poll_s: float,
        *,
        prepare_timeout_s: float = 10.0,
        decision_timeout_s: float = 30.0,
        on_engine_bug: Callable[[], None] | None = None,
    ) -> None:
        if poll_s <= 0 or prepare_timeout_s <= 0 or decision_timeout_s <= 0:
            raise InvalidArgument("poll_s and the timeouts must be > 0")
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
        self._on_engine_bug = on_engine_bug
        self._scanned = False
        self._cursor: int | None = None  # the newest attempt seen by listing
        self._newest: CheckpointPrepare | None = None
        self._fresh = False  # `_newest` was found by this step's listing
        self._handled = 0  # the newest attempt cut (or refused)
        self._max_token = 0  # the newest leader term of an answered prepare
        self._pending: _Pending | None = None

    @property
    def pending(self) -> CheckpointAttempt | None:
        return None if self._pending is None else self._pending.prepare.attempt

    async def run(self, shutdown: asyncio.Event) -> None:
        """Step until `shutdown`, sleeping `poll_s` whenever there was nothing to do."""
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
        # timeout; listing and scans share the remainder.
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
        """DC-9: the newest attempt (at or above the last Commit) with this node's manifest."""
        node_id = self.host.local_participant().node_id
        committed = await highest_cluster_committed_outcome(self.authority)
        start = None if committed is None else committed.checkpoint_id
        ours = None
        async for checkpoint_id in attempts_after(
            self.store, start, limit=SCAN_ATTEMPTS_MAX, inclusive=True
        ):
            self._cursor = checkpoint_id
            if await self._exists(manifest_path(checkpoint_id, node_id)):
                ours = checkpoint_id
        if ours is not None:
            prepare = await read_prepare(self.store, ours)
            if prepare is None:
                raise CorruptRecord(
                    f"attempt {ours} holds a manifest of node {node_id} but no prepare"
                )
            self._pending = _Pending(prepare)
            self._handled = ours
            self._max_token = prepare.leader_proof.fencing_token
            logger.info("resolving attempt %d acked by a previous boot of node %d", ours, node_id)
        if self._cursor is not None:
            self._newest = await read_prepare(self.store, self._cursor)

    async def _discover(self) -> None:
        self._fresh = False
        newest = await newest_attempt(self.store, self._cursor, limit=SCAN_ATTEMPTS_MAX)
        if newest is None:
            return
        self._cursor = newest
        prepare = await read_prepare(self.store, newest)
        if prepare is not None:  # an attempt's objects appear only after its prepare
            self._newest, self._fresh = prepare, True

    # -- P2, P6 ----------------------------------------------------------------------------------
    async def _wait(self, until: float) -> Resolved | None:
        """Poll the pending attempt's decision until `until`; resolve it once known."""
        pending = self._pending
        assert pending is not None
        for poll in range(WAIT_POLLS_MAX):
            if pending.decided is None:
                if poll:
                    await self._discover()
                pending.decided = await self._decision(pending.prepare)
            if pending.decided is not None:
                return await self._resolve(pending, pending.decided)
            remaining_s = until - self.clock.monotonic()
            if remaining_s <= 0:
                return None
            await self.clock.sleep(min(self.poll_s, remaining_s))
        return None

    async def _decision(self, prepare: CheckpointPrepare) -> bool | None:
        """True: committed; False: can never commit (DC-8); None: not known yet."""
        attempt = prepare.attempt
        settlement = await cluster_attempt_settlement(self.authority, attempt)
        if settlement is not None:
            return settlement.epoch == attempt.epoch and settlement.is_commit()  # DC-6
        newest = self._newest
        if (
            newest is not None
            and newest.attempt.checkpoint_id > attempt.checkpoint_id
            and newest.leader_proof.fencing_token > prepare.leader_proof.fencing_token
        ):
            # DC-8: a newer term exists, so the old term can append no outcome any more; any
            # Commit it did append would have shown in the settlement read after this prepare.
            return False
        return None

    async def _resolve(self, pending: _Pending, committed: bool) -> Resolved:
        attempt = pending.prepare.attempt
        deadline = self.clock.monotonic() + self.prepare_timeout_s
        await self.host.resolve(attempt, committed, deadline=deadline)
        self._pending = None
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
        if (
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
        deadline = self.clock.monotonic() + self.prepare_timeout_s
        try:
            async with within_deadline(self.clock, deadline, f"cut of attempt {attempt.epoch}"):
                cut = await self.host.cut(prepare, deadline=deadline)
            digests, output_sha256 = await self._write_cut(prepare, cut, deadline=deadline)
        except Exception as error:  # the host's refusal, a failed write, or a bug
            # No manifest of ours exists, so no Commit can include us: Abort is safe now (and
            # retried by later steps if the host fails to resume).
            self._note_refusal(attempt, error)
            self._pending = _Pending(prepare, decided=False)
            await self._resolve(self._pending, False)
            return Refused(attempt, str(error))
        vnodes = tuple(sorted(cut.vnodes))
        manifest = ParticipantManifest(
            version=RECORD_VERSION,
            attempt=attempt,
            participant=self.host.local_participant(),
            vnodes=vnodes,
            partial_sha256=tuple(digests[v] for v in vnodes),
            output_sha256=output_sha256,
        )
        self._pending = _Pending(prepare)  # from the first manifest write on (P5)
        try:
            await self._put(
                manifest_path(attempt.checkpoint_id, manifest.participant.node_id),
                encode_record(manifest, key="participant manifest"),
                deadline,
            )
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
    ) -> tuple[dict[int, str], str]:
        """P4: every partial (none for a vnode cut empty, DC-15) and the output; their SHA-256
        digests."""
        attempt, me = prepare.attempt, self.host.local_participant()
        count = prepare.fence.vnode_count
        if any(type(v) is not int or not 0 <= v < count for v in cut.vnodes):
            raise InvalidArgument(f"the cut names vnodes outside 0..{count - 1}")
        empty = {v for v, vnode_cut in cut.vnodes.items() if is_empty_cut(v, vnode_cut)}
        bodies = {
            partial_path(attempt.checkpoint_id, v): encode_record(
                partial_of(attempt, v, me, vnode_cut), key="vnode partial"
            )
            for v, vnode_cut in cut.vnodes.items()
            if v not in empty
        }
        out_key = output_path(attempt.checkpoint_id, me.node_id)
        bodies[out_key] = encode_record(output_of(attempt, me, cut.output), key="sink output")
        await gather_bounded([self._putter(key, body, deadline) for key, body in bodies.items()])
        digests = {
            v: EMPTY_PARTIAL_SHA256
            if v in empty
            else sha256_hex(bodies[partial_path(attempt.checkpoint_id, v)])
            for v in cut.vnodes
        }
        return digests, sha256_hex(bodies[out_key])

    def _putter(self, key: str, body: bytes, deadline: float) -> Callable[[], Awaitable[None]]:
        return lambda: self._put(key, body, deadline)

    async def _put(self, key: str, body: bytes, deadline: float) -> None:
        """Create-only; an identical object already there is success (idempotent retries)."""

        async def once() -> None:
            resolution = await put_resolved(self.store, key, body, CREATE)
            if not resolution.ours:
                raise CorruptRecord(f"{key}: holds other bytes ({resolution.state.value})", key=key)

        await retry_until(
            once, what=key, clock=self.clock, deadline=deadline, attempts_max=PUT_ATTEMPTS_MAX
        )

    async def _exists(self, key: str) -> bool:
        try:
            await self.store.head(key)
        except ObjectNotFound:
            return False
        return True

    async def _sleep(self, shutdown: asyncio.Event) -> bool:
        """Sleep `poll_s`, or return True early on shutdown."""
        try:
            async with self.clock.timeout_at(self.clock.monotonic() + self.poll_s):
                await shutdown.wait()
        except TimeoutError:
            return False
        return True
