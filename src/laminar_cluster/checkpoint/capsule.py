"""Recovery capsules: content-addressed, verified on every load (spec §4.10). STUB."""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    RecoveryCapsuleRef,
)


async def create_recovery_capsule(
    ctx: DecisionContext, capsule: ClusterRecoveryCapsule
) -> RecoveryCapsuleRef:
    raise NotImplementedError


async def load_recovery_capsule(
    ctx: DecisionContext, ref: RecoveryCapsuleRef
) -> ClusterRecoveryCapsule:
    raise NotImplementedError


async def validate_recovery_capsule_for_outcome(
    ctx: DecisionContext, outcome: CheckpointOutcome
) -> None:
    raise NotImplementedError
