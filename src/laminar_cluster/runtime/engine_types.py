"""The plain types of `StreamEngine` (engine.py): its source, configuration and progress."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.rebalance.engine.cuts import HostProgress, HostTimings


class SourceLog(Protocol):
    """The partitioned source (`connectors.eventlog.EventLog` is one)."""

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[Sequence[int], Sequence[int], int]: ...

    async def end_offset(self, partition: int, *, deadline: float) -> int: ...

    async def partitions(self, *, deadline: float) -> int | None: ...

    async def poll_ends(self, partitions: Iterable[int], *, deadline: float) -> bool: ...

    async def known_end(self, partition: int, *, deadline: float) -> int: ...

    def caught_up(self, offsets: Mapping[int, int]) -> bool:
        """Whether the ends last polled say no partition of `offsets` (partition -> next
        offset) has an event at or after its offset; False when an end is not known. No
        request."""
        ...


class SourceBatch(NamedTuple):
    """Events `first_offset ..< next_offset` of one partition, in the shape its processor reads:
    `(keys, values)` columns of the reference log (`read_columns`), the JSON records of a
    record log (`runtime.job_processor`), a file split's records (`runtime.file_splits`).
    `events_count`: the events it holds when offsets skip (a split's move to the next file); None:
    `next_offset - first_offset`."""

    first_offset: int
    next_offset: int
    events: Any
    events_count: int | None = None


class BatchReader(Protocol):
    """Reads up to `max_events` events of a partition from `offset` as a `SourceBatch`."""

    async def __call__(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> SourceBatch: ...


def read_columns(log: SourceLog) -> BatchReader:
    """The reference log's reader: each batch's events are its `(keys, values)` columns;
    CorruptRecord when the columns and the offsets disagree."""

    async def read(partition: int, offset: int, max_events: int, *, deadline: float) -> SourceBatch:
        keys, values, next_offset = await log.read(partition, offset, max_events, deadline=deadline)
        if next_offset != offset + len(keys) or len(values) != len(keys):
            raise CorruptRecord(
                f"partition {partition}: a read from offset {offset} returned {len(keys)} "
                f"keys, {len(values)} values and next offset {next_offset}"
            )
        return SourceBatch(offset, next_offset, (keys, values))

    return read


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The reference engine's settings; the restore ones are the host's (`host_timings`)."""

    batch_events: int = 8192  # events per partition read
    read_parallelism: int = 8  # partitions read concurrently per cycle
    idle_s: float = 0.02  # wait when nothing is consumable or every partition is caught up
    # While every partition stays caught up the wait doubles from `idle_s` up to this: the
    # most that new events wait to be noticed after a quiet spell (one poll of the log's ends).
    idle_max_s: float = 1.0
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
        if self.idle_max_s < self.idle_s:
            raise InvalidArgument(
                f"engine config: idle_max_s {self.idle_max_s} is below idle_s {self.idle_s}"
            )

    def host_timings(self) -> HostTimings:
        """The `VnodeHost`'s waits: restores and a cut's wait for them."""
        return HostTimings(
            idle_s=self.idle_s, retry_s=self.retry_s, restore_timeout_s=self.restore_timeout_s
        )


@dataclass(slots=True)
class StreamCounters:
    """Events and batches the reference engine applied (cumulative)."""

    events: int = 0
    batches: int = 0


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """Progress figures for metrics and status: the host's and the reference engine's."""

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
    late_events: int = 0  # a job's, in the state of the vnodes held now
    dead_letters: int = 0


def engine_progress(
    host: HostProgress,
    *,
    events: int = 0,
    batches: int = 0,
    offsets: dict[int, int] | None = None,
    paused_partitions: int = 0,
    figures: dict[str, int] | None = None,
) -> EngineProgress:
    """The host's figures with a data plane's (zero for a plane that counts none)."""
    return EngineProgress(
        events_processed=events,
        batches_processed=batches,
        offsets={} if offsets is None else offsets,
        owned_vnodes=host.owned_vnodes,
        restoring_vnodes=host.restoring_vnodes,
        paused_partitions=paused_partitions,
        holding_cut=host.holding_cut,
        cuts=host.cuts,
        commits=host.commits,
        aborts=host.aborts,
        restores=host.restores,
        errors=host.errors,
        last_error=host.last_error,
        late_events=(figures or {}).get("late_events", 0),
        dead_letters=(figures or {}).get("dead_letters", 0),
    )
