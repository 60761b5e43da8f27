"""The event log's index: per partition, its end offset and the segment of its last batch
(DC §3.7 "Log ends").

| path | record | write mode | writer |
| --- | --- | --- | --- |
| `event-log-ends/shard={s:05}.json` | `EventLogEnds` | create, then update-if-match | producers |

Shard s covers partitions `s * ENDS_SHARD_PARTITIONS ..< (s + 1) * ENDS_SHARD_PARTITIONS`: one
small object for a log of up to 1,024 partitions. For each partition it holds the end offset
(the offset after its last event) and `last`, the segment of its last batch (-1: none), and
for the shard `segments`: every segment below it was read by the writer that published it, so
the shard reflects each batch of its partitions in those segments. A producer publishes after
its segment is durable: it merges its ends into the shard (per partition the larger end wins,
with its `last`; `segments` the larger) and writes it with an update-if-match of the version it
read, re-reading on a race.

A consumer (`EndsView`) reads its shards with a conditional GET (one request, no body while
unchanged) and walks a partition's batches back from `last`, so it reads only segments that
hold the partition. The index is checked against the segments (the last batch must end at the
published end, each batch where the next starts): an index that does not match is
CorruptRecord, never a misread. A shard that is absent is a log with nothing published; a shard
that does not decode is reported and read as absent until it is fixed.
A segment whose end was never published (its producer died first) is invisible to consumers
until a producer starts again: its start reads the segments past `segments` and publishes them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Final, Literal

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.codec import I64, U32, U64, Record, decode, encode_checked
from laminar_cluster.errors import (
    CorruptRecord,
    ObjectAlreadyExists,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, GetResult, IfMatch, ObjectStore, PutMode
from laminar_cluster.store.record_cache import caching, read_watched, record_cache

logger: Final = logging.getLogger(__name__)

ENDS_PREFIX: Final = "event-log-ends/"
ENDS_SHARD_PARTITIONS: Final = 1_024
# 1,024 ends and lasts of at most 20 digits and a separator, and the envelope.
ENDS_SHARD_BYTES_MAX: Final = 48 * 1_024
# A publication races other producers of the same shard at most this many times.
ENDS_PUBLISH_ATTEMPTS_MAX: Final = 16

Published = tuple[int, int]  # (end offset, segment of the last batch; -1: none)


class EventLogEnds(Record):
    """End offsets and last segments of one shard's partitions, by position in the shard; a
    partition past the tuples' end has published nothing (end 0, last -1)."""

    version: Literal[2]
    shard: U32
    segments: U64
    ends: tuple[U64, ...]
    lasts: tuple[I64, ...]


def shard_of(partition: int) -> int:
    return partition // ENDS_SHARD_PARTITIONS


def ends_path(shard: int) -> str:
    return f"{ENDS_PREFIX}shard={shard:05d}.json"


def published_in(record: EventLogEnds, partition: int) -> Published:
    index = partition - record.shard * ENDS_SHARD_PARTITIONS
    if 0 <= index < len(record.ends):
        return record.ends[index], record.lasts[index]
    return 0, -1


def decode_ends(got: GetResult, shard: int) -> EventLogEnds:
    key = ends_path(shard)
    if not got.complete:
        raise CorruptRecord(f"{key}: read {len(got.body)} of {got.meta.size} bytes", key=key)
    record = decode(got.body, EventLogEnds, key=key, max_bytes=ENDS_SHARD_BYTES_MAX)
    if record.shard != shard or len(record.ends) > ENDS_SHARD_PARTITIONS:
        raise CorruptRecord(
            f"{key}: holds shard {record.shard} with {len(record.ends)} ends", key=key
        )
    if len(record.lasts) != len(record.ends):
        raise CorruptRecord(
            f"{key}: {len(record.ends)} ends but {len(record.lasts)} lasts", key=key
        )
    for end, last in zip(record.ends, record.lasts, strict=True):
        if (end == 0) != (last == -1) or not -1 <= last < record.segments:
            raise CorruptRecord(
                f"{key}: end {end} with last segment {last} of {record.segments}", key=key
            )
    return record


def merged(
    record: EventLogEnds | None, shard: int, published: Mapping[int, Published], segments: int
) -> EventLogEnds:
    """`record` with each partition of `published` (all in `shard`) raised to at least its
    (end, last), and `segments` to at least `segments`."""
    ends = list(() if record is None else record.ends)
    lasts = list(() if record is None else record.lasts)
    for partition, (end, last) in published.items():
        index = partition - shard * ENDS_SHARD_PARTITIONS
        assert 0 <= index < ENDS_SHARD_PARTITIONS, f"partition {partition} not in shard {shard}"
        if index >= len(ends):
            ends.extend([0] * (index + 1 - len(ends)))
            lasts.extend([-1] * (index + 1 - len(lasts)))
        if end > ends[index]:
            ends[index], lasts[index] = end, last
    count = max(segments, 0 if record is None else record.segments)
    return EventLogEnds(
        version=2, shard=shard, segments=count, ends=tuple(ends), lasts=tuple(lasts)
    )


async def read_shard(store: ObjectStore, shard: int) -> tuple[EventLogEnds | None, str | None]:
    """The shard as stored (None when absent) and its e_tag: a conditional GET when `store`
    remembers it (`store.record_cache.caching`)."""
    read = await read_watched(
        store,
        ends_path(shard),
        functools.partial(decode_ends, shard=shard),
        EventLogEnds,
        max_bytes=ENDS_SHARD_BYTES_MAX,
    )
    return (None, None) if read is None else read


class EndsView:
    """What a consumer knows of the index: per shard, never read, absent, or the record last
    read. `polled` says the consumer polls it itself (`poll`); a reader that never does reads
    a shard again whenever a read is caught up with it."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = caching(store)
        self._shards: dict[int, EventLogEnds | None] = {}  # None: read, and absent
        self.polled = False

    def known(self, partition: int) -> bool:
        return shard_of(partition) in self._shards

    def published(self, partition: int) -> Published:
        """(end, last) as the shard last read says; (0, -1) when absent or never read."""
        record = self._shards.get(shard_of(partition))
        return (0, -1) if record is None else published_in(record, partition)

    def published_end(self, partition: int) -> int | None:
        """The end the shard last read says, or None when it was never read or is absent."""
        record = self._shards.get(shard_of(partition))
        return None if record is None else published_in(record, partition)[0]

    async def poll_within(
        self, partitions: Iterable[int], *, clock: Clock, deadline: float
    ) -> bool:
        """`poll`, retried on StoreUnavailable until `deadline` (a read is safe to repeat)."""
        return await retry_until(
            functools.partial(self.poll, tuple(partitions)),
            what="read the event log's index",
            clock=clock,
            deadline=deadline,
        )

    async def poll(self, partitions: Iterable[int]) -> bool:
        """Read the shards of `partitions` (a conditional GET each); whether any changed."""
        changed = False
        for shard in sorted({shard_of(partition) for partition in partitions}):
            try:
                record, _ = await read_shard(self._store, shard)
            except CorruptRecord as error:  # reported; read as absent until fixed
                logger.warning("event log index unreadable: %s", error)
                record = None
            if shard not in self._shards or self._shards[shard] != record:
                changed = True
            self._shards[shard] = record
        return changed


async def publish_shard(
    store: ObjectStore, shard: int, published: Mapping[int, Published], segments: int
) -> EventLogEnds:
    """Merge `published` and `segments` into the shard with update-if-match, re-reading on
    every race; StoreUnavailable after ENDS_PUBLISH_ATTEMPTS_MAX races."""
    key = ends_path(shard)
    for _ in range(ENDS_PUBLISH_ATTEMPTS_MAX):
        current, e_tag = await read_shard(store, shard)
        target = merged(current, shard, published, segments)
        if target == current:
            return target
        if current is not None and e_tag is None:
            raise StoreUnavailable(f"{key}: the store gave no e_tag to update the index with")
        mode: PutMode = CREATE if current is None else IfMatch(e_tag=e_tag, version=None)
        body = encode_checked(target, what=key, max_bytes=ENDS_SHARD_BYTES_MAX)
        try:
            written = await store.put(key, body, mode)
        except (ObjectAlreadyExists, PreconditionFailed, WriteOutcomeUnknown):
            continue  # raced, or in doubt: the next read settles it
        cache = record_cache(store)
        if cache is not None:
            cache.watch(key, written.e_tag, target)
        return target
    raise StoreUnavailable(
        f"{key}: index not published after {ENDS_PUBLISH_ATTEMPTS_MAX} racing attempts"
    )
