"""The public producer of a record log: users' events, keyed, into the store's event log.

    async with Producer(store) as producer:
        await producer.send("user-7", {"user": "user-7", "amount": 12.5})

`send` buffers an event in the partition of its key (`partition_of_key`: so the vnode that
reads the partition holds every event of the key, as keyed state needs); `flush` writes
everything buffered as one segment and returns when it is durable and indexed. A flush happens
by itself when `flush_events` events are buffered (or a segment's bytes would be exceeded), and
on a clean exit of `async with`. The first flush declares the log a record log of `partitions`
partitions; a log declared otherwise is InvalidArgument.

One writer per partition: two producers may write one log only on disjoint partitions (for
example one process per range of keys' partitions); a second writer of a partition makes the
appending one fail with `Contended`. If `flush` raises, its events may or may not be in the log
(a segment written but not indexed is published by the next producer's start): read the
partitions' ends (`EventLog.end_offsets`) before sending them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

import msgspec

from laminar_cluster.assignment.vnode import Key
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_records import (
    EVENT_RECORD_BYTES_MAX,
    RECORD_PARTITIONS_DEFAULT,
    check_record_partitions,
    key_hash,
)
from laminar_cluster.connectors.eventlog_segments import (
    EVENT_BATCH_EVENTS_MAX,
    SEGMENT_BYTES_MAX,
)
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore

# What a buffered event adds to its segment beyond its own bytes: its key hash (at most 20
# digits) and two commas; and each partition's batch its envelope.
_EVENT_OVERHEAD_BYTES: Final = 24
_BATCH_OVERHEAD_BYTES: Final = 128
_SEGMENT_BUDGET_BYTES: Final = SEGMENT_BYTES_MAX - 4096
_ENCODER: Final = msgspec.json.Encoder()


class Producer:
    """Sends keyed JSON events to the record log of `store` (see the module docstring).
    `events_sent` counts the events flushed durably by this producer."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        partitions: int = RECORD_PARTITIONS_DEFAULT,
        clock: Clock | None = None,
        flush_events: int = 8192,
        timeout_s: float = 30.0,
    ) -> None:
        check_record_partitions(partitions)
        if not 1 <= flush_events <= EVENT_BATCH_EVENTS_MAX:
            raise InvalidArgument(
                f"flush_events {flush_events} is outside 1..={EVENT_BATCH_EVENTS_MAX}"
            )
        if not timeout_s > 0:
            raise InvalidArgument(f"timeout_s {timeout_s} is not positive")
        self.log = EventLog(store, clock=clock if clock is not None else RealClock())
        self.partitions, self.flush_events, self.timeout_s = partitions, flush_events, timeout_s
        self.events_sent = 0
        self._declared = False
        self._buffer: dict[int, list[tuple[int, bytes]]] = {}  # partition -> (key hash, event)
        self._buffered_events = 0
        self._buffered_bytes = 0

    @property
    def buffered_events(self) -> int:
        """Events sent but not yet flushed."""
        return self._buffered_events

    async def send(self, key: Key, event: Mapping[str, Any] | msgspec.Struct) -> None:
        """Buffer `event` (a JSON object: a mapping of JSON values, or a Struct encoding to an
        object) under `key` (str, bytes, int or a tuple of them); flush first when its bytes
        would overfill the segment, and after it when `flush_events` are buffered.
        InvalidArgument for an event that is not a JSON object or is larger than 64 KiB."""
        body = _encoded(event)
        await self.send_hashed(key_hash(key), body)

    async def send_hashed(self, hashed: int, body: bytes) -> None:
        """`send` of an event already encoded (`body`, a JSON object) under the key whose
        `key_hash` is `hashed` (the repartition of a file source sends what it routed)."""
        partition = hashed % self.partitions
        if self._buffered_events and (
            self._buffered_bytes + self._cost(partition, body) > _SEGMENT_BUDGET_BYTES
        ):
            await self.flush()
        added = self._cost(partition, body)
        self._buffer.setdefault(partition, []).append((hashed, body))
        self._buffered_events += 1
        self._buffered_bytes += added
        if self._buffered_events >= self.flush_events:
            await self.flush()

    def _cost(self, partition: int, body: bytes) -> int:
        """The bytes `body` adds to the segment buffered, at most."""
        batch = 0 if partition in self._buffer else _BATCH_OVERHEAD_BYTES
        return len(body) + _EVENT_OVERHEAD_BYTES + batch

    async def flush(self) -> None:
        """Write everything buffered as one segment (declaring the log on the first flush);
        return when it is durable and indexed. Nothing buffered: no request."""
        if not self._buffered_events:
            return
        batches, count = self._buffer, self._buffered_events
        self._buffer, self._buffered_events, self._buffered_bytes = {}, 0, 0
        deadline = self.log.clock.monotonic() + self.timeout_s
        if not self._declared:
            await self.log.declare_records(self.partitions, deadline=deadline)
            self._declared = True
        await self.log.append_hashed(batches, deadline=deadline)
        self.events_sent += count

    async def __aenter__(self) -> Producer:
        """The producer itself."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Flush on a clean exit; on an error, drop what is buffered."""
        if exc_type is None:
            await self.flush()


def _encoded(event: Mapping[str, Any] | msgspec.Struct) -> bytes:
    try:
        body = _ENCODER.encode(event if isinstance(event, msgspec.Struct | dict) else dict(event))
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as error:
        raise InvalidArgument(f"an event cannot be encoded as JSON: {error}") from error
    if not body.startswith(b"{"):
        raise InvalidArgument(f"an event encodes to a JSON {body[:1]!r}..., not an object")
    if len(body) > EVENT_RECORD_BYTES_MAX:
        raise InvalidArgument(f"an event is {len(body)} bytes; maximum is {EVENT_RECORD_BYTES_MAX}")
    return body
