"""The event log's end offsets: change detection without listing (DC §3.7 "Log ends").

| path | record | write mode | writer |
| --- | --- | --- | --- |
| `event-log-ends/shard={s:05}.json` | `EventLogEnds` | create, then update-if-match | producers |

Shard s holds the end offset (the offset after the last event) of partitions
`s * ENDS_SHARD_PARTITIONS ..< (s + 1) * ENDS_SHARD_PARTITIONS`: one small object for a log of
up to 1,024 partitions. A producer publishes an end after its batch is durable
(`EndsPublisher`): it merges its ends into the shard (each end only ever grows, the larger of
two wins) and writes it with an update-if-match of the version it read, retrying on a race.
Concurrent appends of one process share one write: each waits until a write covered its end.

A consumer (`EndsView`) reads its shards with a conditional GET (one request, no body while
unchanged) and lists a partition only when the shard says it moved past the end the consumer
knows. The shard is never trusted for data: batches are still listed, read and checked as
always, so an end that is too large only costs listings, never a misread. A shard that does
not exist (a log written before ends were published), or that does not decode (reported),
leaves the consumer listing as before.
An end that is too small would hide events, so every producer publishes (the one here always
does, in `append`), and a producer that starts again publishes the ends it lists
(`publish_ends`), which repairs a pointer its predecessor died before updating.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import U32, U64, Record, decode, encode_checked
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
# 1,024 ends of at most 20 digits and a separator, and the envelope.
ENDS_SHARD_BYTES_MAX: Final = 24 * 1_024
# A publication races other producers of the same shard at most this many times.
ENDS_PUBLISH_ATTEMPTS_MAX: Final = 16

_SHARD = re.compile(r"event-log-ends/shard=([0-9]{5})\.json")


class EventLogEnds(Record):
    """End offsets of one shard's partitions, by position in the shard; a partition past the
    tuple's end has published nothing (end 0)."""

    version: Literal[1]
    shard: U32
    ends: tuple[U64, ...]


def shard_of(partition: int) -> int:
    return partition // ENDS_SHARD_PARTITIONS


def ends_path(shard: int) -> str:
    return f"{ENDS_PREFIX}shard={shard:05d}.json"


def end_in(record: EventLogEnds, partition: int) -> int:
    index = partition - record.shard * ENDS_SHARD_PARTITIONS
    return record.ends[index] if 0 <= index < len(record.ends) else 0


def decode_ends(got: GetResult, shard: int) -> EventLogEnds:
    key = ends_path(shard)
    if not got.complete:
        raise CorruptRecord(f"{key}: read {len(got.body)} of {got.meta.size} bytes", key=key)
    record = decode(got.body, EventLogEnds, key=key, max_bytes=ENDS_SHARD_BYTES_MAX)
    if record.shard != shard or len(record.ends) > ENDS_SHARD_PARTITIONS:
        raise CorruptRecord(
            f"{key}: holds shard {record.shard} with {len(record.ends)} ends", key=key
        )
    return record


def merged(record: EventLogEnds | None, shard: int, ends: Mapping[int, int]) -> EventLogEnds:
    """`record` with each of `ends` (partition -> end, all in `shard`) raised to at least it."""
    values = list(() if record is None else record.ends)
    for partition, end in ends.items():
        index = partition - shard * ENDS_SHARD_PARTITIONS
        assert 0 <= index < ENDS_SHARD_PARTITIONS, f"partition {partition} not in shard {shard}"
        if index >= len(values):
            values.extend([0] * (index + 1 - len(values)))
        values[index] = max(values[index], end)
    return EventLogEnds(version=1, shard=shard, ends=tuple(values))


class EndsView:
    """What a consumer knows of the published ends: per shard, unknown (never read: list as
    before), absent (no shard: list as before) or the record last read."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = caching(store)
        self._shards: dict[int, EventLogEnds | None] = {}  # None: read, and absent

    def lists(self, partition: int, known_end: int) -> bool:
        """Whether a reader caught up at `known_end` must list the partition to find more."""
        shard = shard_of(partition)
        if shard not in self._shards:
            return True
        record = self._shards[shard]
        return record is None or end_in(record, partition) > known_end

    def published_end(self, partition: int) -> int | None:
        """The end the shard last read says, or None when it was never read or is absent."""
        record = self._shards.get(shard_of(partition))
        return None if record is None else end_in(record, partition)

    async def poll(self, partitions: Iterable[int]) -> bool:
        """Read the shards of `partitions` (a conditional GET each); whether any changed."""
        changed = False
        for shard in sorted({shard_of(partition) for partition in partitions}):
            try:
                read = await read_watched(
                    self._store,
                    ends_path(shard),
                    functools.partial(decode_ends, shard=shard),
                    EventLogEnds,
                    max_bytes=ENDS_SHARD_BYTES_MAX,
                )
            except CorruptRecord as error:  # never trusted: its partitions are listed instead
                logger.warning("event log ends unreadable; listing instead: %s", error)
                read = None
            record = None if read is None else read[0]
            if shard not in self._shards or self._shards[shard] != record:
                changed = True
            self._shards[shard] = record
        return changed


@dataclass
class _Shard:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wanted: dict[int, int] = field(default_factory=dict)  # partition -> end to publish
    published: EventLogEnds | None = None  # what this process last wrote or read


class EndsPublisher:
    """A producer's side: publish ends after appends, one write for concurrent ones."""

    def __init__(self, store: ObjectStore, clock: Clock) -> None:
        self._store = caching(store)
        self._clock = clock
        self._shards: dict[int, _Shard] = {}

    async def publish(self, ends: Mapping[int, int], *, deadline: float) -> None:
        """Make the published ends at least `ends` (partition -> end). Returns once a write
        (this call's or a concurrent one's) covered them; StoreUnavailable or DeadlineExceeded
        when none could be made (the batches stand: a later publication covers them)."""
        by_shard: dict[int, dict[int, int]] = {}
        for partition, end in ends.items():
            by_shard.setdefault(shard_of(partition), {})[partition] = end
        async with within_deadline(self._clock, deadline, "publish event log ends"):
            for shard, shard_ends in sorted(by_shard.items()):
                await self._publish_shard(shard, shard_ends)

    async def _publish_shard(self, shard: int, ends: dict[int, int]) -> None:
        state = self._shards.setdefault(shard, _Shard())
        for partition, end in ends.items():
            state.wanted[partition] = max(state.wanted.get(partition, 0), end)
        async with state.lock:
            if _covers(state.published, ends):
                return  # a write made while this call waited covered it
            wanted = dict(state.wanted)
            state.published = await self._write(shard, wanted)

    async def _write(self, shard: int, wanted: dict[int, int]) -> EventLogEnds:
        """Merge `wanted` into the shard with update-if-match, re-reading on every race."""
        key = ends_path(shard)
        for _ in range(ENDS_PUBLISH_ATTEMPTS_MAX):
            read = await read_watched(
                self._store,
                key,
                functools.partial(decode_ends, shard=shard),
                EventLogEnds,
                max_bytes=ENDS_SHARD_BYTES_MAX,
            )
            current, e_tag = (None, None) if read is None else read
            target = merged(current, shard, wanted)
            if target == current:
                return target
            mode: PutMode = CREATE if read is None else IfMatch(e_tag=e_tag, version=None)
            if read is not None and e_tag is None:
                raise StoreUnavailable(f"{key}: the store gave no e_tag to update the ends with")
            body = encode_checked(target, what=key, max_bytes=ENDS_SHARD_BYTES_MAX)
            try:
                written = await self._store.put(key, body, mode)
            except (ObjectAlreadyExists, PreconditionFailed, WriteOutcomeUnknown):
                continue  # raced, or in doubt: the next read settles it
            cache = record_cache(self._store)
            if cache is not None:
                cache.watch(key, written.e_tag, target)
            return target
        raise StoreUnavailable(
            f"{key}: ends not published after {ENDS_PUBLISH_ATTEMPTS_MAX} racing attempts"
        )


def _covers(record: EventLogEnds | None, ends: Mapping[int, int]) -> bool:
    return record is not None and all(end_in(record, p) >= end for p, end in ends.items())


def parse_ends_path(path: str) -> int:
    """The shard of an ends path; CorruptRecord if it is not canonical."""
    match = _SHARD.fullmatch(path)
    if match is None or ends_path(int(match.group(1))) != path:
        raise CorruptRecord(f"{path}: not an event log ends path", key=path)
    return int(match.group(1))
