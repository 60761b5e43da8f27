"""The operator declarations a `Job` holds, in chain order (built by `Job`'s methods).

`StepOp` is the general keyed step; `AggregateOp` (running aggregates) and `WindowOp`
(event-time windows) are terminal: their outputs go to the sinks. These are declarations only;
`laminar_cluster.jobs.program.compile_job` turns them into the code a `VnodeRun` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from laminar_cluster.jobs.aggregations import Aggregation
from laminar_cluster.jobs.windows import Window


@dataclass(frozen=True, slots=True)
class StepOp:
    """A keyed step: `fn(state, event) -> (new_state, outputs)`; state starts as `initial()`.

    `state_type` is the type msgspec decodes the state as when a snapshot is restored.
    """

    fn: Callable[[Any, Any], Any]
    initial: Callable[[], Any]
    state_type: Any


@dataclass(frozen=True, slots=True)
class AggregateOp:
    """Running per-key aggregates, emitted at every flush for the keys that received events."""

    aggregations: tuple[Aggregation, ...]


@dataclass(frozen=True, slots=True)
class WindowOp:
    """Per-key aggregates over event-time windows, emitted once when the watermark passes."""

    window: Window
    aggregations: tuple[Aggregation, ...]
    allowed_lateness_ms: int


Operator: TypeAlias = StepOp | AggregateOp | WindowOp
