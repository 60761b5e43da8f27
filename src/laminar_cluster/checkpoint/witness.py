"""The sink-open witness (spec §4.9). STUB: being written."""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointSinkOpenWitness,
    PipelineIdentity,
)


async def sink_open_witness(ctx: DecisionContext) -> CheckpointSinkOpenWitness | None:
    raise NotImplementedError


async def create_sink_open_witness(
    ctx: DecisionContext,
    *,
    pipeline_identity: PipelineIdentity,
    participant_id: int,
    attempt: CheckpointAttempt,
    sinks: tuple[str, ...],
) -> CheckpointSinkOpenWitness:
    raise NotImplementedError


async def clear_sink_open_witness(
    ctx: DecisionContext, expected: CheckpointSinkOpenWitness
) -> None:
    raise NotImplementedError
