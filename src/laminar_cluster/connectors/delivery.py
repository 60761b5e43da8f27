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

from laminar_cluster.clock import Clock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.jobs import STREAMS, SinkSpec
from laminar_cluster.store import ObjectStore


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


@dataclass(frozen=True, kw_only=True)
class Sink(SinkSpec):
    """A sink declaration that opens its writer: the base of every connector's sink.
    `stream` (a keyword) is the Emit stream it receives: "main" (default), "late" or
    "dead_letter"."""

    def __post_init__(self) -> None:
        if self.stream not in STREAMS:
            raise InvalidArgument(
                f"{type(self).__name__}: stream {self.stream!r} is not one of {sorted(STREAMS)}"
            )

    def open(self, store: ObjectStore, clock: Clock) -> SinkWriter:
        """The writer that applies this sink's deliveries (`store`: the cluster's)."""
        raise NotImplementedError
