"""Our coordinated recovery for a drain whose ack quorum was missed (RB §1.3, RB §4.18).

The spec leaves "coordinated recovery" outside the rebalance module: a protocol that stops the
complete predecessor roster (the stop quorum), then calls the two RB §4.18 hooks, then Releases.
This module is our implementation of it for the one case the control plane creates itself,
the ack timeout (RB §4.4 step 6.4): the leader keeps the draining head, marks itself recovering,
and every later live attempt yields ("yielded to coordinated recovery authority", RB-15).

One round (`run_stopped_recovery_round`), on the leader only, while it is recovering and the
durable head is draining:

1. Stop quorum. Every predecessor process of the drain either durably acked it (it stopped its
   sources at the exact cut, RB §4.6, and waits for the verdict) or must be fenced: its process
   lease is taken over (`controller.fence_process_incarnation`), which succeeds only for a
   process that is dead or left. A process that still renews its lease makes the fence fail
   ("renewed"): the round returns None and the next round tries again. This process itself is
   stopped in step 2 instead.
2. The local engine enters stopped recovery (CREATED, runtime cancelled, intake fenced,
   coordinated recovery in progress; its open drain round becomes the stopped one).
3. Under the adoption lock (the serialization StoppedRecovery finalization expects of its
   caller, RB §4.8 step 2): `settle_stopped_source_drain_after_recovery_quorum` materializes the
   drain's Abort (or reconciles a terminal another attempt already made durable).
4. Release: `settle_source_drain_before_recovery_release` re-applies the durable verdict to
   this process's sources (adopting the terminal when it binds this process).
5. The engine leaves stopped recovery and the recovering flag is cleared, so the next
   `try_rebalance` sees the rollback generation and takes the recovery path (RB §1.2) for the
   fenced owner.

A failure in steps 2-4 leaves stopped recovery again but keeps the process recovering, so live
finalization keeps yielding and the next round retries from the durable state. A round that
finds the drain already settled (its terminal durable, say, before a later step failed) and
the local engine running the terminal or a later generation releases recovery mode at once
(`_settled_before`); it used to return on the non-draining head and leave the leader
recovering for good, deferring every later rotation. Every step is
idempotent: fencing an already-fenced process, reconciling an existing terminal and resolving
a resolved drain are all no-ops.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol, runtime_checkable

from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, LaminarError, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.audit.binding import durable_fence
from laminar_cluster.rebalance.cluster.drain_acks import acked_participants
from laminar_cluster.rebalance.cluster.slots import read_drain_acks
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.coordinated.hooks import (
    settle_source_drain_before_recovery_release,
    settle_stopped_source_drain_after_recovery_quorum,
)
from laminar_cluster.rebalance.refusals import Refusal

logger: Final = logging.getLogger(__name__)


@runtime_checkable
class StoppableEngine(Protocol):
    """An engine coordinated recovery can stop and release (`BaseEngine` is one)."""

    def enter_stopped_recovery(self) -> None: ...

    def leave_stopped_recovery(self) -> None: ...


async def run_stopped_recovery_round(ctx: RebalanceContext) -> int | None:
    """One coordinated-recovery round for a draining head left by a missed ack quorum; the
    settled terminal version, or None when there is nothing to do or the stop quorum is not
    complete yet. A hook's error when it refuses (Refused: the next round retries)."""
    controller = ctx.controller
    if not controller.is_leader() or not controller.is_recovering():
        return None
    if _settled_before(ctx):
        return None
    deadline = ctx.head_deadline()
    try:
        async with within_deadline(ctx.clock, deadline, "stopped recovery head read"):
            head = await ctx.snapshots.load()
    except DeadlineExceeded as error:
        raise DeadlineExceeded("stopped recovery head read timed out") from error
    if head is None or head.drain_transition is None:
        return None
    transition = head.drain_transition
    waiting = await unfenced_predecessor_processes(ctx, transition, deadline=deadline)
    if waiting:
        logger.info(
            "draining assignment %d: stopped recovery waits for %s",
            head.assignment_version,
            ", ".join(f"node-{p.node_id}" for p in waiting),
        )
        return None
    engine = ctx.engine
    if not isinstance(engine, StoppableEngine):
        raise InvalidArgument("the local engine cannot enter stopped recovery")
    engine.enter_stopped_recovery()
    try:
        settled = await _settle_stopped(ctx, transition, deadline)
        if settled is not None:
            release_deadline = ctx.head_deadline()
            fence = await _terminal_fence(ctx, settled, release_deadline)
            await settle_source_drain_before_recovery_release(ctx, fence, deadline=release_deadline)
    finally:
        engine.leave_stopped_recovery()
    controller.set_recovering(False)
    logger.warning(
        "draining assignment %d settled by stopped recovery at version %s",
        head.assignment_version,
        settled,
    )
    return settled


def _settled_before(ctx: RebalanceContext) -> bool:
    """The drain this process requested stopped recovery for is already settled: an earlier
    round made its terminal durable and then failed, or another leader settled it, and the
    local engine runs that terminal (or a later generation; the watcher audited it and settled
    the local source drain first). Nothing is left to coordinate: recovery mode is released,
    which would otherwise defer every later rotation for good."""
    requested = ctx.controller.stopped_recovery_request()
    if requested is None:
        return False
    target_version = requested.target.assignment_version
    running = ctx.engine.registry().version
    if running < target_version:
        return False
    ctx.controller.set_recovering(False)
    logger.warning(
        "drain %d->%d was settled before its stopped recovery; the local engine runs "
        "assignment %d: recovery mode released",
        requested.predecessor.assignment_version,
        target_version,
        running,
    )
    return True


async def unfenced_predecessor_processes(
    ctx: RebalanceContext, transition: AssignmentDrainTransition, *, deadline: float
) -> tuple[FenceParticipant, ...]:
    """The predecessor processes that neither acked `transition` nor could be fenced now
    (they still renew their lease). Fences every other non-acking process; this process is
    never fenced (it stops itself)."""
    async with within_deadline(ctx.clock, deadline, "stopped recovery ack read"):
        acks = await read_drain_acks(ctx.snapshots.store, ctx.clock, deadline=deadline)
    acked = acked_participants(acks, transition)
    me = ctx.me
    waiting: list[FenceParticipant] = []
    for process in transition.predecessor.participants:
        if process in acked or process == me:
            continue
        try:
            await ctx.controller.fence_process_incarnation(process, deadline=deadline)
        except LaminarError as error:
            logger.info("stopped recovery cannot fence node-%d yet: %s", process.node_id, error)
            waiting.append(process)
    return tuple(waiting)


async def _settle_stopped(
    ctx: RebalanceContext, transition: AssignmentDrainTransition, deadline: float
) -> int | None:
    """Step 3, serialized with adoption and drain installation by the adoption lock."""
    lock = ctx.engine.adoption_lock
    try:
        async with within_deadline(ctx.clock, deadline, "stopped recovery lock"):
            await lock.acquire()
    except DeadlineExceeded as error:
        raise DeadlineExceeded("timed out serializing stopped source-drain settlement") from error
    try:
        return await settle_stopped_source_drain_after_recovery_quorum(ctx, transition.predecessor)
    finally:
        lock.release()


async def _terminal_fence(
    ctx: RebalanceContext, version: int, deadline: float
) -> CheckpointAssignmentFence:
    """The fence of the settled terminal at `version` (what Release expects)."""
    try:
        async with within_deadline(ctx.clock, deadline, "stopped recovery terminal read"):
            terminal = await ctx.snapshots.load_version(version)
    except DeadlineExceeded as error:
        raise DeadlineExceeded("stopped recovery terminal read timed out") from error
    if terminal is None or terminal.draining:
        raise Refused(
            f"stopped recovery lost the terminal of assignment {version}",
            reason=Refusal.TERMINAL_PRUNED,
        )
    return durable_fence(terminal)
