"""The plain types of `StreamEngine` (engine.py): its source, configuration and progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.coordinator.host import Cut
from laminar_cluster.errors import InvalidArgument


class SourceLog(Protocol):
    """The partitioned source (`runtime.eventlog.EventLog` is one)."""

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[Sequence[int], Sequence[int], int]: ...

    async def end_offset(self, partition: int, *, deadline: float) -> int: ...

    async def partitions(self, *, deadline: float) -> int | None: ...


@dataclass(frozen=True, slots=True)
class EngineConfig:
    batch_events: int = 8192  # events per partition read
    read_parallelism: int = 8  # partitions read concurrently per cycle
    idle_s: float = 0.02  # wait when nothing is consumable or every partition is caught up
    retry_s: float = 0.25  # wait after a failed read or restore
    read_timeout_s: float = 10.0
    restore_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.batch_events < 1 or self.read_parallelism < 1:
            raise InvalidArgument(
                f"engine config: batch_events {self.batch_events} and read_parallelism "
                f"{self.read_parallelism} must be at least 1"
            )
        if min(self.idle_s, self.retry_s, self.read_timeout_s, self.restore_timeout_s) <= 0:
            raise InvalidArgument("engine config: every interval must be positive")


@dataclass(frozen=True, slots=True)
class HeldCut:
    attempt: CheckpointAttempt
    cut: Cut
    vnodes: tuple[int, ...]


@dataclass(slots=True)
class EngineCounters:
    events: int = 0
    batches: int = 0
    cuts: int = 0
    commits: int = 0
    aborts: int = 0
    restores: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """Progress figures for metrics and status."""

    events_processed: int
    batches_processed: int
    offsets: dict[int, int]  # partition -> next offset, active vnodes only
    owned_vnodes: int
    restoring_vnodes: int
    paused_partitions: int
    holding_cut: CheckpointAttempt | None
    cuts: int
    commits: int
    aborts: int
    restores: int
    errors: int
    last_error: str | None = None
