"""`StreamEngine`: the reference engine. A `RebalanceEngine` (it extends `BaseEngine`, whose
control rules it keeps unchanged) and the coordinator's `CheckpointHost` (issue 7; spec_rebalance
§6.2; DC §1.7, DC §1.9, DC §3.2-§3.5; docs/protocols/distributed-checkpoint.md).

Processing (`run`, engine_loop.py): while intake is open (source gate open, RUNNING with an
ACTIVE installed fence; a held cut does not close it) it reads its active vnodes' partitions
round-robin and feeds the `Processor`. A batch is applied synchronously, only if intake is still
open and the partition still stands at the offset it was read from: every gate, cut, drain and
adoption falls on a batch boundary, and a read overtaken by one is discarded (reads have no
effects).

Ownership: on adoption, vnodes no longer owned are dropped; newly owned ones are *restoring*
until the run loop restores them through the `Restorer` (restoring.py): a handoff from the latest
committed cluster checkpoint, a recovery generation (every owned vnode, cold) from its recovery
checkpoint. Restoring vnodes neither process nor emit, `local_vnode_state_is_ready` is False
while any restores, and a cut waits for them (DC §3.4).

Source drains (DC §3.5): `prepare_local_source_drain` pauses the vnodes leaving this boot
(`revoking_vnodes`); Abort resumes them; after Commit they stay paused until the adoption of
the target drops them.

Checkpoints (exactly-once at depth 1, DC §1.7): `cut` captures, at one batch boundary, every owned
vnode's state and offsets plus the output since the last committed checkpoint (a synchronous
freeze, `Processor.capture`), encodes it in a worker thread and holds it until `resolve`; no
second cut is taken before then. Processing does not pause: events after the cut are part of
neither the cut's state nor its output. Commit makes exactly the cut's output history (the
processor's baseline becomes the cut); Abort keeps it pending, so the next cut emits it again
merged with what came after, and no state rolls back in either case. A fault or a recovery
generation releases a held cut; one that happens while the cut encodes refuses it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from laminar_cluster.assignment.digest import (
    AssignmentDrainId,
    drain_id,
)
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.coordinator.host import Cut, VnodeCut
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.base import (
    AdoptHook,
    BaseEngine,
    ShuffleState,
    VnodeStateReady,
)
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.engine.rules import registry_runs
from laminar_cluster.rebalance.interfaces import (
    Activation,
    Adoption,
    EngineState,
    InitialState,
    RecoveryCut,
    SourceDrainOutcome,
)
from laminar_cluster.runtime.engine_loop import EngineLoop
from laminar_cluster.runtime.engine_types import (
    EngineConfig,
    EngineCounters,
    EngineProgress,
    HeldCut,
    SourceLog,
)
from laminar_cluster.runtime.processor import Processor
from laminar_cluster.runtime.restoring import (
    HandoffRestore,
    InitialRestore,
    RecoveryRestore,
    Restorer,
    RestoreSource,
)
from laminar_cluster.runtime.vnode_table import VnodeTable, revoking_vnodes

logger: Final = logging.getLogger(__name__)

DRAIN_TARGETS_KEPT: Final = 8  # validated draining owner maps remembered for drain prepares


class StreamEngine(BaseEngine):
    """One process's data plane: sources, per-vnode processing, cuts and restores."""

    def __init__(
        self,
        *,
        clock: Clock,
        participant: FenceParticipant,
        log: SourceLog,
        processor: Processor,
        restorer: Restorer,
        partitions: int | None = None,
        config: EngineConfig | None = None,
        checkpointer: Checkpointer | None = None,
        vnode_state_ready: VnodeStateReady | None = None,
        adopt_hook: AdoptHook | None = None,
    ) -> None:
        super().__init__(
            clock=clock,
            participant=participant,
            checkpointer=checkpointer,
            vnode_state_ready=vnode_state_ready,
            adopt_hook=adopt_hook,
        )
        self.log = log
        self.processor = processor
        self.restorer = restorer
        self.config = config or EngineConfig()
        self.table = VnodeTable(partitions or 0)
        self.partitions_known = partitions is not None
        self.counters = EngineCounters()
        self._changed = asyncio.Event()
        self._cutting: CheckpointAttempt | None = None
        self._held: HeldCut | None = None
        self._drain_targets: dict[AssignmentDrainId, tuple[int, ...]] = {}
        self._drain: tuple[AssignmentDrainId, int] | None = None  # paused round, target version
        self._loop = EngineLoop(self)

    # -- the processing task -------------------------------------------------------------------
    async def run(self, shutdown: asyncio.Event) -> None:
        """Restore and process until `shutdown` is set (run it in the node's TaskGroup)."""
        await self._loop.run(shutdown)

    def intake_open(self) -> bool:
        """Consume while the source gate is open and the installed fence runs; a cut (held or
        being encoded) does not pause it (module docstring)."""
        return not self.cluster_intake_fenced() and self.running_fence() is not None

    def notify(self) -> None:
        """Wake everything waiting for a state change (the run loop, a cut)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, timeout_s: float) -> None:
        """Until the next state change, at most `timeout_s`."""
        changed = self._changed
        try:
            async with self.clock.timeout_at(self.clock.monotonic() + timeout_s):
                await changed.wait()
        except TimeoutError:
            pass

    def progress(self) -> EngineProgress:
        table, counters = self.table, self.counters
        return EngineProgress(
            events_processed=counters.events,
            batches_processed=counters.batches,
            offsets=dict(sorted(table.offsets.items())),
            owned_vnodes=len(table.owned),
            restoring_vnodes=len(table.restoring),
            paused_partitions=len(table.paused_partitions()),
            holding_cut=None if self._held is None else self._held.attempt,
            cuts=counters.cuts,
            commits=counters.commits,
            aborts=counters.aborts,
            restores=counters.restores,
            errors=counters.errors,
            last_error=counters.last_error,
        )

    async def source_lag(self, *, deadline: float) -> dict[int, int]:
        """Events behind the log's end, per consumed partition."""
        offsets = dict(self.table.offsets)
        lag: dict[int, int] = {}
        async with within_deadline(self.clock, deadline, "source lag"):
            for partition, offset in sorted(offsets.items()):
                end = await self.log.end_offset(partition, deadline=deadline)
                lag[partition] = max(0, end - offset)
        return lag

    # -- RebalanceEngine: gates ----------------------------------------------------------------
    def set_source_gate(self, closed: bool) -> None:
        super().set_source_gate(closed)
        self.notify()

    async def activate_authority(
        self,
        fence: CheckpointAssignmentFence,
        drain_transition: AssignmentDrainTransition | None,
        revision: int,
        *,
        deadline: float,
    ) -> Activation:
        activation = await super().activate_authority(
            fence, drain_transition, revision, deadline=deadline
        )
        self.notify()
        return activation

    def leave_stopped_recovery(self) -> None:
        super().leave_stopped_recovery()
        self.notify()

    async def local_vnode_state_is_ready(
        self, fence: CheckpointAssignmentFence, *, deadline: float
    ) -> bool:
        """BaseEngine's rule, and no owned vnode is still restoring."""
        ready = await super().local_vnode_state_is_ready(fence, deadline=deadline)
        return ready and not self.table.restoring

    # -- RebalanceEngine: adoption -------------------------------------------------------------
    async def adopt_assignment(self, snapshot: AssignmentSnapshot, *, deadline: float) -> Adoption:
        """BaseEngine's adoption; then drop vnodes no longer owned and restore new ones from
        the latest committed cluster checkpoint (a handoff)."""
        before = self.registry()
        adoption = await super().adopt_assignment(snapshot, deadline=deadline)
        if self.registry() != before:
            owned = self._owned_in_registry()
            dropped = self.table.adopt(
                len(self.registry().owners), owned, adoption.newly_acquired, HandoffRestore()
            )
            for vnode in (*dropped, *self.table.restoring):
                self.processor.drop(vnode)
            if self._drain is not None and self.registry().version >= self._drain[1]:
                self.table.resume()
                self._drain = None
            self.notify()
        return adoption

    async def adopt_recovery_assignment(
        self,
        snapshot: AssignmentSnapshot,
        recovery_checkpoint: RecoveryCut | None,
        *,
        deadline: float,
    ) -> Adoption:
        """BaseEngine's recovery adoption; then every owned vnode restores cold from
        `recovery_checkpoint` (the initial state: every owned vnode starts empty)."""
        before = self.registry()
        adoption = await super().adopt_recovery_assignment(
            snapshot, recovery_checkpoint, deadline=deadline
        )
        if self.registry() != before:
            owned = self._owned_in_registry()
            source: RestoreSource = HandoffRestore()
            if isinstance(recovery_checkpoint, InitialState):
                source = InitialRestore()
            elif recovery_checkpoint is not None:
                source = RecoveryRestore(recovery_checkpoint)
            for vnode in self.table.restart_all(len(self.registry().owners), owned, source):
                self.processor.drop(vnode)
            self._release_cut("a recovery generation was adopted")
            self._drain = None
            self.notify()
        return adoption

    async def fault_for_recovery_assignment(self) -> None:
        """BaseEngine's fault; then every vnode's state is dropped."""
        await super().fault_for_recovery_assignment()
        for vnode in self.table.clear():
            self.processor.drop(vnode)
        self._release_cut("the engine faulted for a recovery assignment")
        self._drain = None
        self.notify()

    # -- RebalanceEngine: source drains --------------------------------------------------------
    def validate_source_drain_snapshot(self, draining: AssignmentSnapshot) -> None:
        """BaseEngine's check; the target owner map is remembered for the drain prepare."""
        super().validate_source_drain_snapshot(draining)
        transition = draining.drain_transition
        if transition is None:
            return
        self._drain_targets[drain_id(transition)] = tuple(draining.owners)
        while len(self._drain_targets) > DRAIN_TARGETS_KEPT:
            del self._drain_targets[next(iter(self._drain_targets))]

    async def prepare_local_source_drain(
        self,
        transition: AssignmentDrainTransition,
        participant: FenceParticipant,
        *,
        deadline: float,
    ) -> None:
        """BaseEngine's receipt; then the vnodes leaving this process stop consuming."""
        await super().prepare_local_source_drain(transition, participant, deadline=deadline)
        round_ = drain_id(transition)
        if self.drains.open_round() != round_:
            return  # already resolved: nothing is left to stop
        target = self._drain_targets.get(round_)
        revoking = revoking_vnodes(self.table.owned, self.participant, transition.target, target)
        if revoking is None:
            logger.warning("drain %s: target owner map not validated; pausing every vnode", round_)
            revoking = self.table.owned
        self.table.pause(revoking)
        self._drain = (round_, transition.target.assignment_version)
        self.notify()

    async def resolve_local_source_drain(
        self, drain: AssignmentDrainId, outcome: SourceDrainOutcome, *, deadline: float
    ) -> None:
        """BaseEngine's resolution; Abort resumes the paused vnodes, Commit keeps them
        paused until the adoption of the target drops them."""
        await super().resolve_local_source_drain(drain, outcome, deadline=deadline)
        if self._drain is not None and self._drain[0] == drain:
            if outcome is SourceDrainOutcome.ABORT:
                self.table.resume()
                self._drain = None
            self.notify()

    # -- CheckpointHost ------------------------------------------------------------------------
    def local_participant(self) -> FenceParticipant:
        return self.participant

    def running_fence(self) -> CheckpointAssignmentFence | None:
        fence = self.installed_fence()
        if (
            fence is None
            or self.shuffle_state() is not ShuffleState.ACTIVE
            or self.state() is not EngineState.RUNNING
            or self.runtime_cancelled()
        ):
            return None
        return fence

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        """Capture every owned vnode at one batch boundary (waiting, within the deadline, for
        restoring ones), then encode that frozen cut while processing goes on; Refused when the
        fence is not the one we run (before or after the encoding) or another attempt is still
        unresolved. The same attempt again returns the same cut."""
        attempt = prepare.attempt
        held = self._held
        if held is not None and held.attempt == attempt:
            return held.cut
        what = f"checkpoint cut of epoch {attempt.epoch}"
        async with within_deadline(self.clock, deadline, what):
            self._check_cut(prepare)
            if held is not None or self._cutting is not None:
                busy = held.attempt if held is not None else self._cutting
                assert busy is not None
                raise Refused(f"{what}: epoch {busy.epoch} is cut and not resolved")
            self._cutting = attempt
            try:
                while self.table.restoring:
                    await self.wait_change(self.config.idle_s)
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
        """Commit: the held output is history. Abort: it stays pending. Then resume. An attempt
        we do not hold (released by a fault, or cut by an earlier boot) is a no-op."""
        held = self._held
        if held is None or held.attempt != attempt:
            logger.info("resolve of epoch %d: no cut held for it", attempt.epoch)
            return
        for vnode in held.vnodes:
            if committed:
                self.processor.commit_output(vnode)
            else:
                self.processor.abort_output(vnode)
        if committed:
            self.counters.commits += 1
        else:
            self.counters.aborts += 1
        self._held = None
        self.notify()

    def _check_cut(self, prepare: CheckpointPrepare) -> None:
        fence = self.running_fence()
        if fence is None or prepare.fence != fence:
            raise Refused(
                f"checkpoint epoch {prepare.attempt.epoch}: fence "
                f"v{prepare.fence.assignment_version} is not the fence this process runs"
            )
        if not registry_runs(self.registry(), fence):
            raise Refused(f"checkpoint epoch {prepare.attempt.epoch}: registry moved on")

    async def _capture(self, prepare: CheckpointPrepare) -> HeldCut:
        """Freeze every owned (all active) vnode's state, offsets and output in one synchronous
        step, then encode the frozen copies in a worker thread: processing goes on meanwhile
        (the processor's encoder reads only what it froze). An untouched vnode (restored empty,
        nothing applied since) is cut as the empty state without asking the processor (DC-15).
        A fault, a recovery generation or an adoption while it encodes refuses the cut (its
        output is aborted, no manifest)."""
        attempt = prepare.attempt
        offsets = self.table.cut_offsets()
        vnodes = tuple(sorted(self.table.owned))
        if set(vnodes) != offsets.keys():
            raise Refused(f"checkpoint epoch {attempt.epoch}: a vnode is still restoring")
        empty = frozenset(vnode for vnode in vnodes if vnode in self.table.untouched)  # DC-15
        encode = self.processor.capture(tuple(v for v in vnodes if v not in empty))
        try:
            encoded = await asyncio.to_thread(encode)
            self._check_cut(prepare)
        except BaseException:
            for vnode in vnodes:
                self.processor.abort_output(vnode)
            raise
        cuts = {
            vnode: VnodeCut(
                state=None if vnode in empty else encoded.states[vnode], offsets=offsets[vnode]
            )
            for vnode in vnodes
        }
        return HeldCut(attempt, Cut(vnodes=cuts, output=encoded.output), vnodes)

    def _release_cut(self, reason: str) -> None:
        held = self._held
        if held is not None:
            logger.info("cut of epoch %d released: %s", held.attempt.epoch, reason)
            for vnode in held.vnodes:
                self.processor.abort_output(vnode)
        self._held = None

    def _owned_in_registry(self) -> tuple[int, ...]:
        me = self.participant.node_id
        return tuple(v for v, owner in enumerate(self.registry().owners) if owner == me)
