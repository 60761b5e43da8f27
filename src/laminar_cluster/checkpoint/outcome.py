"""Outcomes (spec §4.4-§4.6). STUB: being written."""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.records import (
    CheckpointAssignmentFence,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    LeaderProof,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
)


async def canonical_outcome(
    ctx: DecisionContext,
    *,
    epoch: int,
    checkpoint_id: int,
    scope: CheckpointScope,
    verdict: CheckpointVerdict,
    assignment_fence: CheckpointAssignmentFence | None,
    leader_proof: LeaderProof | None,
    recovery_capsule: RecoveryCapsuleRef | None,
) -> CheckpointOutcome:
    raise NotImplementedError


async def record_outcome(
    ctx: DecisionContext,
    *,
    epoch: int,
    checkpoint_id: int,
    scope: CheckpointScope,
    verdict: CheckpointVerdict,
    assignment_fence: CheckpointAssignmentFence | None,
    leader_proof: LeaderProof | None,
    recovery_capsule: RecoveryCapsuleRef | None,
) -> RecordOutcomeResult:
    raise NotImplementedError


async def outcome(ctx: DecisionContext, epoch: int) -> CheckpointOutcome | None:
    raise NotImplementedError


async def outcomes(ctx: DecisionContext) -> list[CheckpointOutcome]:
    raise NotImplementedError


async def audited_outcomes(ctx: DecisionContext) -> list[CheckpointOutcome]:
    raise NotImplementedError


async def highest_terminal_outcome(ctx: DecisionContext) -> CheckpointOutcome | None:
    raise NotImplementedError
