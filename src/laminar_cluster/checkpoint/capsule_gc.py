"""Recovery capsule garbage collection (spec §4.11). STUB: being written."""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.checkpoint.context import DecisionContext


@dataclass(frozen=True)
class RecoveryCapsuleGcStep:
    examined: int
    deleted: int
    quarantined: int
    pending: bool


async def sweep_recovery_capsules_step(
    ctx: DecisionContext, before_epoch: int, known_live_digests: frozenset[str]
) -> RecoveryCapsuleGcStep:
    raise NotImplementedError
