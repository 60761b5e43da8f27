"""`CutKeeper`: the checkpoint half of the `VnodeHost` (vnode_host.py), the coordinator's
`CheckpointHost` for any data plane (DC, exactly-once at depth 1; DC §3.4).

`cut` captures, at one batch boundary, every owned vnode through `DataPlane.capture` (a
synchronous freeze), runs the plane's encoder in a worker thread and holds the cut until
`resolve`; no second cut is taken before then, and the same attempt again gets the same cut.
Processing does not pause: events after the cut are part of neither its state nor its output.
The cut waits (within its deadline) for restoring vnodes, and is refused when the fence is not
the one this process runs, before or after the encoding. Commit makes exactly the cut's output
history; Abort keeps it pending, so the next cut emits it again merged with what came after;
no state rolls back in either case. A fault or a recovery generation releases a held cut; one
that happens while the cut encodes refuses it.

`quiescent_through` (DC-21) is the checkpoint id of the last cut resolved as committed while
nothing happened here since: no other cut taken, no ownership move or restore (the `VnodeHost`
calls `moved`), and the plane still `quiescent_since_cut`. The node reports it with each
renewal; the checkpoint leader skips a periodic checkpoint while every participant reports the
last Commit.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final, Protocol

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import InvalidArgument, LaminarError, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.rebalance.engine.data_plane import Cut, DataPlane, plane_quiescent
from laminar_cluster.rebalance.engine.restores import PendingRestore
from laminar_cluster.rebalance.engine.rules import registry_runs
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.rotation_lock import RotationLock

logger: Final = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HostTimings:
    """The host's waits, in seconds."""

    idle_s: float = 0.02  # the restore loop's wait with nothing due; a cut's wait for restores
    retry_s: float = 0.25  # the first wait after a failed restore (then doubling)
    restore_timeout_s: float = 30.0  # one `Restorer` call

    def __post_init__(self) -> None:
        if min(self.idle_s, self.retry_s, self.restore_timeout_s) <= 0:
            raise InvalidArgument("host timings: every interval must be positive")


@dataclass(slots=True)
class HostCounters:
    """What the host did since it started (cumulative)."""

    cuts: int = 0
    commits: int = 0
    aborts: int = 0
    restores: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class HostProgress:
    """The host's figures (the plane may report its own beside them)."""

    owned_vnodes: int
    restoring_vnodes: int
    holding_cut: CheckpointAttempt | None
    cuts: int
    commits: int
    aborts: int
    restores: int
    errors: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class HeldCut:
    """A cut taken and not resolved yet: its attempt, the cut and the vnodes it froze."""

    attempt: CheckpointAttempt
    cut: Cut
    vnodes: tuple[int, ...]


class CutRequest(Protocol):
    """What a cut is asked for (`coordinator.records.CheckpointPrepare` is one)."""

    @property
    def attempt(self) -> CheckpointAttempt: ...

    @property
    def fence(self) -> CheckpointAssignmentFence: ...


class ControlView(Protocol):
    """What the host reads from its `BaseEngine`."""

    clock: Clock
    participant: FenceParticipant
    rotation_lock: RotationLock

    def registry(self) -> RegistrySnapshot: ...

    def running_fence(self) -> CheckpointAssignmentFence | None: ...

    def intake_open(self) -> bool: ...


class CutKeeper:
    """Cuts of `plane` under `engine`'s running fence; `owned` and `restoring` are kept by the
    `VnodeHost` that extends it."""

    def __init__(self, engine: ControlView, plane: DataPlane, timings: HostTimings) -> None:
        self.engine = engine
        self.plane = plane
        self.timings = timings
        self.owned: frozenset[int] = frozenset()
        self.restoring: dict[int, PendingRestore] = {}
        self.counters = HostCounters()
        self._changed = asyncio.Event()
        self._cutting: CheckpointAttempt | None = None
        self._held: HeldCut | None = None
        self._committed_through: int | None = None  # DC-21: the last cut committed, unmoved

    def quiescent_through(self) -> int | None:
        """DC-21: the checkpoint id of the last committed cut when nothing changed since (no
        cut held or encoding, nothing restoring, the plane quiescent since that cut); else
        None."""
        through = self._committed_through
        if through is None or self._held is not None or self._cutting is not None:
            return None
        if self.restoring or not plane_quiescent(self.plane):
            return None
        return through

    def moved(self) -> None:
        """Ownership moved, a vnode was restored or the vnodes were dropped: the last committed
        cut no longer holds everything here (DC-21)."""
        self._committed_through = None

    def notify(self) -> None:
        """Wake everything waiting for a state change (the plane's run, a cut)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, timeout_s: float) -> None:
        """Until the next state change, at most `timeout_s`."""
        changed, clock = self._changed, self.engine.clock
        try:
            async with clock.timeout_at(clock.monotonic() + timeout_s):
                await changed.wait()
        except TimeoutError:
            pass

    def failed(self, error: LaminarError) -> None:
        """An expected failure of the restore loop or the plane: logged and counted."""
        self.counters.errors += 1
        self.counters.last_error = str(error)
        logger.warning("engine step failed: %s", error)

    def progress(self) -> HostProgress:
        counters, held = self.counters, self._held
        return HostProgress(
            owned_vnodes=len(self.owned),
            restoring_vnodes=len(self.restoring),
            holding_cut=None if held is None else held.attempt,
            cuts=counters.cuts,
            commits=counters.commits,
            aborts=counters.aborts,
            restores=counters.restores,
            errors=counters.errors,
            last_error=counters.last_error,
        )

    # -- CheckpointHost ------------------------------------------------------------------------
    def local_participant(self) -> FenceParticipant:
        """This process (node id and boot)."""
        return self.engine.participant

    def running_fence(self) -> CheckpointAssignmentFence | None:
        """The fence whose vnodes this process runs now (None: not running one)."""
        return self.engine.running_fence()

    async def cut(self, prepare: CutRequest, *, deadline: float) -> Cut:
        """Capture every owned vnode at one batch boundary (waiting, within the deadline, for
        restoring ones), then encode that frozen cut while processing goes on; Refused when the
        fence is not the one we run (before or after the encoding) or another attempt is still
        unresolved. The same attempt again returns the same cut."""
        attempt = prepare.attempt
        held = self._held
        if held is not None and held.attempt == attempt:
            return held.cut
        what = f"checkpoint cut of epoch {attempt.epoch}"
        async with within_deadline(self.engine.clock, deadline, what):
            self._check_cut(prepare)
            if held is not None or self._cutting is not None:
                busy = held.attempt if held is not None else self._cutting
                assert busy is not None
                raise Refused(f"{what}: epoch {busy.epoch} is cut and not resolved")
            self._cutting = attempt
            self._committed_through = None
            try:
                while self.restoring:
                    await self.wait_change(self.timings.idle_s)
                self._check_cut(prepare)
                held = await self._capture(prepare)
                self._held = held
            finally:
                self._cutting = None
                self.notify()
        self.counters.cuts += 1
        return held.cut

    async def resolve(
        self, attempt: CheckpointAttempt, committed: bool, *, deadline: float
    ) -> None:
        """Commit: the held output is history. Abort: it stays pending. An attempt we do not
        hold (released by a fault, or cut by an earlier boot) is a no-op."""
        held = self._held
        if held is None or held.attempt != attempt:
            logger.info("resolve of epoch %d: no cut held for it", attempt.epoch)
            return
        self.plane.resolve(held.vnodes, committed)
        if committed:
            self.counters.commits += 1
            self._committed_through = attempt.checkpoint_id
        else:
            self.counters.aborts += 1
        self._held = None
        self.notify()

    def release_cut(self, reason: str) -> None:
        """Forget a held cut; its output stays pending."""
        self._committed_through = None
        held = self._held
        if held is not None:
            logger.info("cut of epoch %d released: %s", held.attempt.epoch, reason)
            self.plane.resolve(held.vnodes, committed=False)
        self._held = None

    def _check_cut(self, prepare: CutRequest) -> None:
        fence = self.engine.running_fence()
        if fence is None or prepare.fence != fence:
            raise Refused(
                f"checkpoint epoch {prepare.attempt.epoch}: fence "
                f"v{prepare.fence.assignment_version} is not the fence this process runs"
            )
        if not registry_runs(self.engine.registry(), fence):
            raise Refused(f"checkpoint epoch {prepare.attempt.epoch}: registry moved on")

    async def _capture(self, prepare: CutRequest) -> HeldCut:
        """Freeze every owned (all running) vnode in one synchronous step, then encode the
        frozen copies in a worker thread: processing goes on meanwhile. A fault, a recovery
        generation or an adoption while it encodes refuses the cut (its output stays
        pending)."""
        attempt = prepare.attempt
        vnodes = tuple(sorted(self.owned))
        if self.restoring:
            raise Refused(f"checkpoint epoch {attempt.epoch}: a vnode is still restoring")
        encode = self.plane.capture(vnodes)
        try:
            cut = await asyncio.to_thread(encode)
            self._check_cut(prepare)
            if set(cut.vnodes) != set(vnodes):
                raise InvalidArgument(
                    f"checkpoint epoch {attempt.epoch}: the data plane cut vnodes "
                    f"{sorted(cut.vnodes)}, not the owned {list(vnodes)}"
                )
        except BaseException:
            self.plane.resolve(vnodes, committed=False)
            raise
        return HeldCut(attempt, cut, vnodes)
