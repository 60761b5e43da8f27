"""Checkpoint ID allocation (spec §4.3). STUB: being written."""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext


async def allocate_checkpoint_id_at_least(
    ctx: DecisionContext, minimum: int, *, deadline: float
) -> int:
    raise NotImplementedError
