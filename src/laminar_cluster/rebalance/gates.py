"""Authority closure primitives (RB §4.15; RB-12, RB-13).

Closing stops local intake and withdraws the published fence and drain transition *before* it
waits for anything, then re-asserts the same under the adoption lock (a watcher holding the
lock may have reopened authority meanwhile), and finally waits for in-flight execution to
drain. `suspend` keeps the shuffle certificate so the same version can resume after a
transient doubt; `close` (recovery) invalidates it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import DeadlineExceeded
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import ProcessLeaseFence
from laminar_cluster.rebalance.context import RebalanceContext

logger: Final = logging.getLogger(__name__)


def _withdraw(ctx: RebalanceContext, *, invalidate: bool) -> None:
    ctx.engine.set_source_gate(True)
    ctx.controller.publish_checkpoint_assignment_fence(None)
    ctx.controller.publish_checkpoint_drain_transition(None)
    if invalidate:
        ctx.engine.invalidate_shuffle_fence()
    else:
        ctx.engine.suspend_shuffle_fence()


async def _lock(ctx: RebalanceContext, deadline: float, what: str) -> None:
    try:
        async with within_deadline(ctx.clock, deadline, what):
            await ctx.engine.adoption_lock.acquire()
    except DeadlineExceeded as error:
        raise DeadlineExceeded(f"timed out serializing assignment authority {what}") from error


async def _drain_execution(ctx: RebalanceContext, deadline: float, what: str) -> None:
    try:
        async with within_deadline(ctx.clock, deadline, what):
            await ctx.engine.rotation_lock.drain()
    except DeadlineExceeded as error:
        raise DeadlineExceeded(f"timed out draining assignment execution after {what}") from error


async def close_local_assignment_authority(
    ctx: RebalanceContext,
    target: CheckpointAssignmentFence,
    removed: Sequence[FenceParticipant],
    *,
    deadline: float,
) -> tuple[ProcessLeaseFence, ...]:
    """Close authority, fence every removed process, fault locally if `target` certifies this
    boot, and wait for execution to drain (RB §4.15)."""
    _withdraw(ctx, invalidate=True)
    await _lock(ctx, deadline, "closure")
    try:
        _withdraw(ctx, invalidate=True)
        fences = await asyncio.gather(
            *(
                ctx.controller.fence_process_incarnation(process, deadline=deadline)
                for process in removed
            )
        )
        me = ctx.me
        if target.participant_incarnation(me.node_id) == me.boot_incarnation:
            await ensure_local_recovery_fault(ctx, deadline=deadline)
    finally:
        ctx.engine.adoption_lock.release()
    await _drain_execution(ctx, deadline, "closure")
    return tuple(fences)


async def suspend_local_assignment_authority(ctx: RebalanceContext, *, deadline: float) -> None:
    """Fail closed but resumable: the certificate and its sequence domain are kept (RB §4.15)."""
    _withdraw(ctx, invalidate=False)
    await _lock(ctx, deadline, "suspension")
    try:
        _withdraw(ctx, invalidate=False)
    finally:
        ctx.engine.adoption_lock.release()
    await _drain_execution(ctx, deadline, "suspension")


async def suspend_recovery_assignment_authority(ctx: RebalanceContext, *, deadline: float) -> None:
    """A recovery participant's suspension: withdraw under the lock, then drain execution.
    The spec's try-suspend also refuses while the engine has an unapplied vnode transition; an
    engine here applies every transition under the adoption lock, so it never has one
    (docs/protocols/rebalance.md, deviations)."""
    await _lock(ctx, deadline, "suspension")
    try:
        _withdraw(ctx, invalidate=False)
    finally:
        ctx.engine.adoption_lock.release()
    await _drain_execution(ctx, deadline, "suspension")


async def ensure_local_recovery_fault(ctx: RebalanceContext, *, deadline: float) -> None:
    """Mark this process recovering and publish a durable local recovery fault (RB §4.15)."""
    ctx.controller.set_recovering(True)
    await ctx.controller.publish_local_recovery_fault(deadline=deadline)
