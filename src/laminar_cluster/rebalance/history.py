"""The assignment history a leader keeps after each materialized version: the pair [v-1, v]
(RB-17: snapshots pruned first, then the authority's drain decisions), best effort.

Ours (RB-11, RB-17): a participant of v that still runs an older version w < v - 1 (its adoption
report says so) follows the chain edge by edge and needs every snapshot from w on: a drain it
acked at w resolves only against w, its committed predecessor. So the floor is also kept at or
below w: a lagging participant is never left holding vnodes of a version whose snapshot is gone
(the simulation's seed 6978: it stalled for good, and once leader jumped over the drains). The
reports are read once per materialized version (one listing and a GET per process); a failed
read skips this prune, the next rotation retries.
"""

from __future__ import annotations

import logging
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.authority.decision_floor import prune_assignment_drain_decisions_before
from laminar_cluster.errors import LaminarError
from laminar_cluster.rebalance.context import RebalanceContext

logger: Final = logging.getLogger(__name__)


async def prune_after(ctx: RebalanceContext, version: int, proof: object) -> None:
    """Keep the pair [v-1, v] and what a lagging participant of v still runs: snapshots
    first, then decisions (RB-17). Best effort."""
    try:
        before = min(version - 1, await _oldest_run_by_a_participant(ctx, version))
    except LaminarError as error:
        logger.warning("assignment prune after %d skipped: %s", version, error)
        return
    if before <= 0:
        return
    try:
        await ctx.snapshots.prune_before(before)
    except LaminarError as error:
        logger.warning("assignment snapshot prune before %d failed: %s", before, error)
        return
    current = ctx.controller.capture_leader_proof()
    if current is None or current != proof:
        return
    try:
        await prune_assignment_drain_decisions_before(
            ctx.authority, current, before, deadline=ctx.head_deadline()
        )
    except LaminarError as error:
        logger.warning("assignment decision prune before %d failed: %s", before, error)


async def _oldest_run_by_a_participant(ctx: RebalanceContext, version: int) -> int:
    """The lowest assignment version an exact participant (node and boot) of `version` reports
    running, or `version` when none reports an older one."""
    snapshot = await ctx.snapshots.load_version(version)
    if snapshot is None:
        return version  # pruned meanwhile by a newer head: its own prune decides
    participants = set(snapshot_fence(snapshot).participants)
    reports = await ctx.controller.read_adopted_assignments(deadline=ctx.head_deadline())
    running = [r.assignment_version for r in reports if r.participant in participants]
    return min([version, *running])
