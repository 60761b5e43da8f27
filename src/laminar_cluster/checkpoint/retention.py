"""Retention: the outcome GC floor, its horizon and boundary, pruning (spec §4.7-§4.8). STUB."""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.checkpoint.context import DecisionContext


@dataclass(frozen=True)
class OutcomeRetentionBoundary:
    """Not persisted: the floor's horizon and its anchors' coordinates (spec §3.7)."""

    before_epoch: int
    committed_checkpoint_id: int | None
    highest_closed_epoch: int | None


async def outcome_gc_floor_horizon(ctx: DecisionContext) -> int:
    raise NotImplementedError


async def outcome_retention_boundary(ctx: DecisionContext) -> OutcomeRetentionBoundary:
    raise NotImplementedError


async def prune_outcomes_before(ctx: DecisionContext, before: int, *, deadline: float) -> int:
    raise NotImplementedError
