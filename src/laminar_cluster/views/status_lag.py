"""Source lag for `laminar-cluster status`: per event-log partition, the log's end offset minus
the committed offset in the last committed checkpoint's capsule (`source_offsets`, 0 when the
capsule has none); unknown without an event log. Partitions are the declared ones, else those
holding a batch under `events/` (one single-key LIST per partition)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from laminar_cluster.checkpoint.records import ClusterRecoveryCapsule
from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.runtime.eventlog import EventLog
from laminar_cluster.runtime.eventlog_batches import (
    EVENT_LOG_PARTITIONS_MAX,
    EVENTS_PREFIX,
    partition_prefix,
)
from laminar_cluster.store import ObjectStore

LAG_UNKNOWN_NOTE: Final = "source lag unknown: this reader has no event log"
PARTITIONS_PREFIX: Final = f"{EVENTS_PREFIX}partition="  # the start of every `partition_prefix`
PAST_PARTITION_KEYS: Final = "~"  # sorts after every `offset=...` name inside a partition
LAG_PARTITIONS_LISTED_MAX: Final = 4_096


class EndOffsets(Protocol):
    """The event log as the lag needs it (runtime.eventlog.EventLog satisfies it):
    `partitions` is the declared partition count (None when undeclared)."""

    async def partitions(self, *, deadline: float) -> int | None: ...

    async def end_offset(self, partition: int, *, deadline: float) -> int: ...


EventLogOpener = Callable[[ObjectStore], EndOffsets]


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
    for partition in await _partitions(store, log, notes, deadline):
        end = await log.end_offset(partition, deadline=deadline)
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
    """The declared partitions, else those with a batch under `events/`."""
    declared = await log.partitions(deadline=deadline)
    if declared is not None:
        return list(range(declared))
    listed = await listed_partitions(store, limit=LAG_PARTITIONS_LISTED_MAX)
    if len(listed) > LAG_PARTITIONS_LISTED_MAX:
        notes.append(f"source lag covers the first {LAG_PARTITIONS_LISTED_MAX} partitions listed")
    return listed[:LAG_PARTITIONS_LISTED_MAX]


async def listed_partitions(store: ObjectStore, *, limit: int) -> list[int]:
    """The partitions holding at least one batch, ascending, at most `limit` + 1 of them: one
    single-key LIST per partition, each starting after the previous partition's keys."""
    found: list[int] = []
    after: str | None = None
    for _ in range(limit + 1):
        metas = await store.list(PARTITIONS_PREFIX, offset=after, limit=1)
        if not metas:
            break
        key = metas[0].key
        digits = key[len(PARTITIONS_PREFIX) :].split("/", 1)[0]
        partition = int(digits) if digits.isdigit() else -1
        canonical = 0 <= partition < EVENT_LOG_PARTITIONS_MAX  # then the prefix re-formats
        if not canonical or not key.startswith(partition_prefix(partition)):
            raise CorruptRecord(f"{key}: not under an event log partition", key=key)
        found.append(partition)
        after = partition_prefix(partition) + PAST_PARTITION_KEYS
    return found


def event_log_opener(clock: Clock) -> EventLogOpener:
    """The event log behind the lag column (runtime.eventlog), on the status clock."""

    def open_log(store: ObjectStore) -> EndOffsets:
        return EventLog(store, clock=clock)

    return open_log
