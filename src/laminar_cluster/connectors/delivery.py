"""What a sink receives and the interface every sink writer implements (issue 16, "Sinks").

A `Delivery` is one participant's output records of one committed checkpoint for one sink. A
`SinkWriter` applies each delivery exactly once: the deliverer hands it the deliveries of a sink
in ascending checkpoint id, and after a crash it hands some of them again, starting from
`delivered_through` (inclusive), which the writer must then treat as no-ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Delivery:
    """One participant's records of one committed checkpoint for one sink."""

    job: str
    checkpoint_id: int  # the committed checkpoint (attempt) id, u64
    node_id: int  # the participant's node id (nonzero u64)
    records: Sequence[Mapping[str, Any]]  # in the order emitted; may be empty


class SinkWriter(Protocol):
    """A sink's writer: applies deliveries exactly once, idempotent on replay."""

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        """Apply the delivery exactly once: True if applied now, False if it was already
        applied (a replay: no effect). Idempotent under crashes at any await."""
        ...

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        """The highest checkpoint id with a delivery applied for `job`, None if none.
        The deliverer restarts from this id (inclusive) after a crash."""
        ...

    async def close(self) -> None:
        """Release the writer's resources (connections, clients); idempotent."""
        ...
