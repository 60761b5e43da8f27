"""Source lag for `laminar-cluster status`: per event-log partition, the log's end offset minus
the committed offset in the last committed checkpoint's capsule (`source_offsets`, 0 when the
capsule has none); unknown without an event log. Partitions are the declared ones, else those
with an end in the log's index (`event-log-ends/`, one GET per 1,024 partitions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from laminar_cluster.checkpoint.records import ClusterRecoveryCapsule
from laminar_cluster.clock import Clock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_ends import ENDS_SHARD_PARTITIONS, published_in, read_shard
from laminar_cluster.connectors.eventlog_segments import EVENT_LOG_PARTITIONS_MAX
from laminar_cluster.store import ObjectStore

LAG_UNKNOWN_NOTE: Final = "source lag unknown: this reader has no event log"
LAG_PARTITIONS_LISTED_MAX: Final = 4_096


class EndOffsets(Protocol):
    """The event log as the lag needs it (connectors.eventlog.EventLog satisfies it):
    `partitions` is the declared partition count (None when undeclared)."""

    async def partitions(self, *, deadline: float) -> int | None: ...

    async def end_offsets(
        self, partitions: Sequence[int], *, deadline: float
    ) -> dict[int, int]: ...


EventLogOpener = Callable[[ObjectStore], EndOffsets]


def log_events(offsets: Mapping[str, int], log_partitions: int | None) -> int:
    """The events a checkpoint's source offsets say were consumed: the sum over the event
    log's partitions (all, when its layout is unknown). A file source's split partitions,
    beyond the log's (runtime/file_splits.py), hold file positions, not counts."""
    if log_partitions is None:
        return sum(offsets.values())
    return sum(offset for partition, offset in offsets.items() if int(partition) < log_partitions)


async def source_lag(
    store: ObjectStore,
    log: EndOffsets | None,
    capsule: ClusterRecoveryCapsule | None,
    notes: list[str],
    deadline: float,
) -> dict[str, Any]:
    """The lag section: known, total and one row per partition."""
    if log is None:
        return {"known": False, "total": None, "partitions": [], "note": LAG_UNKNOWN_NOTE}
    committed = {} if capsule is None else capsule.source_offsets
    rows = []
    partitions = await _partitions(store, log, notes, deadline)
    ends = await log.end_offsets(partitions, deadline=deadline)
    for partition in partitions:
        end = ends[partition]
        done = committed.get(str(partition), 0)
        rows.append(
            {
                "partition": partition,
                "end_offset": end,
                "committed_offset": done,
                "lag": max(0, end - done),
            }
        )
    return {
        "known": True,
        "total": sum(row["lag"] for row in rows),
        "partitions": rows,
        "note": "end offset minus the last committed checkpoint's offset, per partition",
    }


async def _partitions(
    store: ObjectStore, log: EndOffsets, notes: list[str], deadline: float
) -> list[int]:
    """The declared partitions, else those with an end in the index."""
    declared = await log.partitions(deadline=deadline)
    if declared is not None:
        return list(range(declared))
    indexed = await indexed_partitions(store, limit=LAG_PARTITIONS_LISTED_MAX)
    if len(indexed) > LAG_PARTITIONS_LISTED_MAX:
        notes.append(f"source lag covers the first {LAG_PARTITIONS_LISTED_MAX} partitions indexed")
    return indexed[:LAG_PARTITIONS_LISTED_MAX]


async def indexed_partitions(store: ObjectStore, *, limit: int) -> list[int]:
    """The partitions with an end in the index, ascending, at most `limit` + 1 of them: the
    shards in order, until one is absent (CorruptRecord for one that does not decode)."""
    found: list[int] = []
    for shard in range(EVENT_LOG_PARTITIONS_MAX // ENDS_SHARD_PARTITIONS):
        record, _ = await read_shard(store, shard)
        if record is None:
            break
        base = shard * ENDS_SHARD_PARTITIONS
        found.extend(
            base + index
            for index in range(len(record.ends))
            if published_in(record, base + index)[0] > 0
        )
        if len(found) > limit:
            break
    return found[: limit + 1]


def event_log_opener(clock: Clock) -> EventLogOpener:
    """The event log behind the lag column (connectors.eventlog), on the status clock."""

    def open_log(store: ObjectStore) -> EndOffsets:
        return EventLog(store, clock=clock)

    return open_log
