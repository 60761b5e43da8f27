"""The assignment history a leader keeps after each materialized version: the pair [v-1, v]
(RB-17: snapshots pruned first, then the authority's drain decisions), best effort."""

from __future__ import annotations

import logging
from typing import Final

from laminar_cluster.authority.decision_floor import prune_assignment_drain_decisions_before
from laminar_cluster.errors import (
    LaminarError,
)
from laminar_cluster.rebalance.context import RebalanceContext

logger: Final = logging.getLogger(__name__)


async def prune_after(ctx: RebalanceContext, version: int, proof: object) -> None:
    """Keep the pair [v-1, v]: snapshots first, then decisions (RB-17). Best effort."""
    before = version - 1
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
