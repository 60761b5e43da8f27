"""The checkpoint decision store (docs/protocols/checkpoint-decisions.md): see `decision_store`."""

from laminar_cluster.checkpoint.decision_store import DecisionStore
from laminar_cluster.checkpoint.records import (
    AllocatorMode,
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    Conflict,
    Created,
    RecordOutcomeResult,
    Unchanged,
)

__all__ = [
    "AllocatorMode",
    "CheckpointAttempt",
    "CheckpointOutcome",
    "CheckpointScope",
    "CheckpointVerdict",
    "Conflict",
    "Created",
    "DecisionStore",
    "RecordOutcomeResult",
    "Unchanged",
]
