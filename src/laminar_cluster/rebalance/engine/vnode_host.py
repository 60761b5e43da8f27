"""`VnodeHost`: what `BaseEngine` does for every data plane (DataPlane in data_plane.py;
docs/embedding.md; DC §3.1-§3.5, RB §2.8 for the source drain).

* Ownership. On adoption, vnodes no longer owned are dropped; newly owned ones are *restoring*
  until the restore loop (`run`) fetches their committed cuts through the `Restorer`: a handoff
  from the latest committed cluster checkpoint, a recovery generation (every owned vnode, cold)
  from its recovery checkpoint. Each restore carries a generation, so one that finishes after
  the ownership moved on is discarded. `BaseEngine.local_vnode_state_is_ready` is False while
  any vnode restores, and a cut waits for them (DC §3.4). A failed restore waits, doubling from
  `retry_s` up to RESTORE_BACKOFF_S_MAX, so it neither starves processing nor floods the store.
* Source drains (RB §2.8): `prepare_local_source_drain` pauses the vnodes leaving this boot
  (`revoking_vnodes`, from the target owner map `validate_source_drain_snapshot` saw); Abort
  resumes them; after Commit they stay paused until the adoption of the target drops them.
* Checkpoints (exactly-once at depth 1, DC): the host is the coordinator's `CheckpointHost`
  (cuts.py): it holds at most one cut until its outcome is known.

The plane is called only between awaits (its methods are synchronous), and `notify` wakes the
plane's `run` (through its `Intake`) and a cut waiting for restores.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Protocol

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id, fence_matches_owner_map
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.cuts import ControlView, CutKeeper, HostTimings
from laminar_cluster.rebalance.engine.data_plane import DataPlane, Intake, VnodeCut
from laminar_cluster.rebalance.engine.restores import (
    HandoffRestore,
    PendingRestore,
    RestoredCuts,
    Restorer,
    RestoreSource,
    restore_source,
)
from laminar_cluster.rebalance.interfaces import RecoveryCut, RegistrySnapshot, SourceDrainOutcome

logger: Final = logging.getLogger(__name__)

RESTORE_BACKOFF_S_MAX: Final = 5.0
DRAIN_TARGETS_KEPT: Final = 8  # validated draining owner maps remembered for drain prepares


def revoking_vnodes(
    owned: frozenset[int],
    me: FenceParticipant,
    target: CheckpointAssignmentFence,
    target_owners: Sequence[int] | None,
) -> frozenset[int] | None:
    """The owned vnodes a drain to `target` takes from this boot (DC §3.5): all of them when the
    target does not certify this boot; None when the target's owner map is unknown or does not
    match `target` (the caller then pauses every owned vnode, which is always safe)."""
    if target.participant_incarnation(me.node_id) != me.boot_incarnation:
        return owned
    if target_owners is None or not fence_matches_owner_map(target, target_owners):
        return None
    return frozenset(v for v in owned if v >= len(target_owners) or target_owners[v] != me.node_id)


class VnodeHooks(Protocol):
    """What `BaseEngine` tells its host, right after the state each call names moved."""

    def notify(self) -> None: ...

    def ready(self) -> bool: ...

    def adopted(self, registry: RegistrySnapshot, acquired: Sequence[int]) -> None: ...

    def restarted(self, registry: RegistrySnapshot, cut: RecoveryCut | None) -> None: ...

    def faulted(self) -> None: ...

    def remember_drain_target(self, draining: AssignmentSnapshot) -> None: ...

    def drain_prepared(self, transition: AssignmentDrainTransition) -> None: ...

    def drain_resolved(self, drain: AssignmentDrainId, outcome: SourceDrainOutcome) -> None: ...


class _NoVnodes:
    """The hooks of an engine without a data plane: no vnode runs, so nothing to do."""

    def notify(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    def adopted(self, registry: RegistrySnapshot, acquired: Sequence[int]) -> None:
        pass

    def restarted(self, registry: RegistrySnapshot, cut: RecoveryCut | None) -> None:
        pass

    def faulted(self) -> None:
        pass

    def remember_drain_target(self, draining: AssignmentSnapshot) -> None:
        pass

    def drain_prepared(self, transition: AssignmentDrainTransition) -> None:
        pass

    def drain_resolved(self, drain: AssignmentDrainId, outcome: SourceDrainOutcome) -> None:
        pass


NO_VNODES: Final = _NoVnodes()


class VnodeHost(CutKeeper):
    """The vnodes `plane` runs for `engine`, their restores, drain pauses and cuts."""

    def __init__(
        self,
        engine: ControlView,
        plane: DataPlane,
        restorer: Restorer,
        timings: HostTimings | None = None,
    ) -> None:
        super().__init__(engine, plane, timings or HostTimings())
        self.restorer = restorer
        self.vnode_count = 0
        self.paused: frozenset[int] = frozenset()
        self.intake: Intake = _HostIntake(self)
        self._generations = itertools.count(1)
        self._drain_targets: dict[AssignmentDrainId, tuple[int, ...]] = {}
        self._drain: tuple[AssignmentDrainId, int] | None = None  # paused round, target version
        self._restore_after = 0.0
        self._restore_backoff_s = self.timings.retry_s

    # -- ownership (BaseEngine calls these right after the registry moved) ---------------------
    def adopted(self, registry: RegistrySnapshot, acquired: Sequence[int]) -> None:
        """A plain adoption: drop vnodes no longer owned; newly owned ones (and `acquired`)
        restore from the latest committed checkpoint; a drain paused for this version ends."""
        self._set_vnode_count(len(registry.owners))
        owned = self._owned_in(registry)
        dropped = tuple(sorted(self.owned - owned))
        if dropped or acquired or owned != self.owned:
            self.moved()
        for vnode in dropped:
            self.restoring.pop(vnode, None)
        new = (owned - self.owned) | (frozenset(acquired) & owned)
        self.owned = owned
        for vnode in sorted(new):
            self._start_restore(vnode, HandoffRestore())
        for vnode in (*dropped, *self.restoring):
            self.plane.drop(vnode)
        paused = self.paused & owned
        if self._drain is not None and registry.version >= self._drain[1]:
            paused, self._drain = frozenset(), None
        self._set_paused(paused)
        self.notify()

    def restarted(self, registry: RegistrySnapshot, cut: RecoveryCut | None) -> None:
        """A recovery generation: every vnode held is dropped (and a held cut released); every
        owned vnode restores cold from `cut`."""
        held = self._clear()
        self.moved()
        self._set_vnode_count(len(registry.owners))
        self.owned = self._owned_in(registry)
        source = restore_source(cut)
        for vnode in sorted(self.owned):
            self._start_restore(vnode, source)
        for vnode in held:
            self.plane.drop(vnode)
        self.release_cut("a recovery generation was adopted")
        self.notify()

    def faulted(self) -> None:
        """Every vnode's state is dropped (and a held cut released)."""
        self.moved()
        for vnode in self._clear():
            self.plane.drop(vnode)
        self.release_cut("the engine faulted for a recovery assignment")
        self.notify()

    def ready(self) -> bool:
        """No owned vnode is still restoring."""
        return not self.restoring

    # -- source drains -------------------------------------------------------------------------
    def remember_drain_target(self, draining: AssignmentSnapshot) -> None:
        """The target owner map of a validated draining snapshot, for its drain prepare."""
        transition = draining.drain_transition
        if transition is None:
            return
        self._drain_targets[drain_id(transition)] = tuple(draining.owners)
        while len(self._drain_targets) > DRAIN_TARGETS_KEPT:
            del self._drain_targets[next(iter(self._drain_targets))]

    def drain_prepared(self, transition: AssignmentDrainTransition) -> None:
        """The drain round is open: the vnodes leaving this process stop consuming."""
        round_ = drain_id(transition)
        target = self._drain_targets.get(round_)
        revoking = revoking_vnodes(self.owned, self.engine.participant, transition.target, target)
        if revoking is None:
            logger.warning("drain %s: target owner map not validated; pausing every vnode", round_)
            revoking = self.owned
        self._set_paused(revoking & self.owned)
        self._drain = (round_, transition.target.assignment_version)
        self.notify()

    def drain_resolved(self, drain: AssignmentDrainId, outcome: SourceDrainOutcome) -> None:
        """Abort resumes the paused vnodes; after Commit they stay paused until the adoption of
        the target drops them."""
        if self._drain is not None and self._drain[0] == drain:
            if outcome is SourceDrainOutcome.ABORT:
                self._set_paused(frozenset())
                self._drain = None
            self.notify()

    # -- the host's task -----------------------------------------------------------------------
    async def run(self, shutdown: asyncio.Event) -> None:
        """Run the plane and restore vnodes until `shutdown` is set (in the node's TaskGroup)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.plane.run(self.intake, shutdown))
            await self._restore_until(shutdown)

    async def _restore_until(self, shutdown: asyncio.Event) -> None:
        clock, timings = self.engine.clock, self.timings
        while not shutdown.is_set():
            if not self.restoring or clock.monotonic() < self._restore_after:
                await self.wait_change(timings.idle_s)
                continue
            try:
                await self._restore()
            except LaminarError as error:
                self._restore_after = clock.monotonic() + self._restore_backoff_s
                self._restore_backoff_s = min(2 * self._restore_backoff_s, RESTORE_BACKOFF_S_MAX)
                self.failed(error)
                await self.wait_change(timings.retry_s)
                continue
            self._restore_backoff_s = timings.retry_s

    async def _restore(self) -> None:
        """Restore every restoring vnode, one `Restorer` call per source."""
        pending = dict(self.restoring)
        by_source: dict[RestoreSource, list[int]] = {}
        for vnode, restore in sorted(pending.items()):
            by_source.setdefault(restore.source, []).append(vnode)
        for source, vnodes in by_source.items():
            deadline = self.engine.clock.monotonic() + self.timings.restore_timeout_s
            cuts = await self.restorer(source, tuple(vnodes), deadline=deadline)
            for vnode in vnodes:
                self._finish(vnode, pending[vnode], cuts)
        self.notify()

    def _finish(self, vnode: int, restore: PendingRestore, cuts: RestoredCuts) -> None:
        if self.restoring.get(vnode) != restore:
            return  # the ownership moved on while the restore ran
        if vnode not in cuts:
            raise CorruptRecord(f"restore of vnode {vnode}: the restorer returned no cut for it")
        cut = cuts[vnode]
        _check_restored(vnode, cut)
        self.plane.restore(vnode, cut, vnode_count=self.vnode_count)
        self.moved()
        del self.restoring[vnode]
        self.counters.restores += 1

    # -- internals -----------------------------------------------------------------------------
    def _owned_in(self, registry: RegistrySnapshot) -> frozenset[int]:
        me = self.engine.participant.node_id
        return frozenset(v for v, owner in enumerate(registry.owners) if owner == me)

    def _set_vnode_count(self, vnode_count: int) -> None:
        if vnode_count <= 0:
            raise InvalidArgument(f"vnode count {vnode_count} is not positive")
        if self.vnode_count not in (0, vnode_count) and self.owned:
            raise InvalidArgument(
                f"vnode count {vnode_count} differs from the {self.vnode_count} this engine runs"
            )
        self.vnode_count = vnode_count

    def _start_restore(self, vnode: int, source: RestoreSource) -> None:
        self.restoring[vnode] = PendingRestore(source, next(self._generations))

    def _set_paused(self, paused: frozenset[int]) -> None:
        if paused != self.paused:
            self.paused = paused
            self.plane.pause(paused)

    def _clear(self) -> tuple[int, ...]:
        """Forget every vnode (and the drain pause); returns the vnodes that were held."""
        held = tuple(sorted(self.owned))
        self.owned = frozenset()
        self.restoring.clear()
        self._drain = None
        self._set_paused(frozenset())
        return held


def _check_restored(vnode: int, cut: VnodeCut | None) -> None:
    """An empty cut names no offset above 0 (DC-15); CorruptRecord otherwise."""
    if cut is not None and cut.state is None and any(o != 0 for o in cut.offsets.values()):
        raise CorruptRecord(f"restore of vnode {vnode}: no state but offsets above 0")


class _HostIntake:
    """The `Intake` the plane's `run` gets."""

    def __init__(self, host: VnodeHost) -> None:
        self._host = host

    def open(self) -> bool:
        return self._host.engine.intake_open()

    def executing(self) -> AbstractAsyncContextManager[None]:
        return self._host.engine.rotation_lock.shared()

    async def changed(self, timeout_s: float) -> None:
        await self._host.wait_change(timeout_s)

    def failed(self, error: LaminarError) -> None:
        self._host.failed(error)
