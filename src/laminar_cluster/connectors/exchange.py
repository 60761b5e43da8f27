"""The repartition of a file source's events to their keys' owners (docs/jobs.md, "File
sources"): the `ExchangeWriter` sink appends committed routed events to the store's record log,
where the owner of each key's vnode reads them, and `Exchanged`, the form they take there.

The first stage (the owner of a file's vnode) turns each record into events, keys them, and
emits them grouped per record log partition, each group an `EXCHANGE` record `{"p": partition,
"h": the first event's key hash, "e": [event JSON, ...]}` of at most 64 KiB: output like any
other, pending until its checkpoint commits. Grouping makes the repartition's cost per group,
not per event (an output record, a log record, a tag). The leader's deliverer hands each
committed checkpoint's groups, participant by participant, to this writer, which wraps each as
one log record `{"c": checkpoint, "n": node, "i": index, "e": [...]}` (`i` counts the
delivery's groups of one partition) and appends them with a `Producer` (one segment per flush).
So in every partition the tags `(c, n, i)` of a delivery and of successive ones ascend, and a
delivery appended again (after a crash of the leader, or by a deposed one) repeats tags already
seen: the reading stage skips every group whose tag is not above the last it applied in that
partition, a figure cut with the partition's offset in each checkpoint. The delivery is
therefore at least once into the log and exactly once into the keyed steps.

`delivered_through` is the highest checkpoint named by the last event of any partition (one
read of the index and of the segments holding those events): every earlier checkpoint was
delivered whole, since deliveries are in order; the deliverer restarts from it, inclusive.
"""

from __future__ import annotations

from typing import Final

import msgspec

from laminar_cluster.clock import Clock
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.eventlog_records import EVENT_RECORD_BYTES_MAX
from laminar_cluster.connectors.eventlog_segments import U64_MAX
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.store import ObjectStore

EXCHANGE: Final = "exchange"  # the stream of routed events; no user sink takes it
# What the wrapping adds to a group: `{"c":<20>,"n":<20>,"i":<20>,"e":[...]}`.
EXCHANGE_OVERHEAD_BYTES: Final = 128
# A group's events, with a comma between each two: at most this many bytes (so one event too).
ROUTED_GROUP_BYTES_MAX: Final = EVENT_RECORD_BYTES_MAX - EXCHANGE_OVERHEAD_BYTES

Tag = tuple[int, int, int]  # (checkpoint, node, index)


class Exchanged(msgspec.Struct, frozen=True):
    """A group of routed events as the record log holds it, one record (module docstring)."""

    c: int
    n: int
    i: int
    e: list[msgspec.Raw]

    @property
    def tag(self) -> Tag:
        return (self.c, self.n, self.i)


class Routed(msgspec.Struct, frozen=True):
    """An `EXCHANGE` output record: a group of events of one partition `p`, in order, and the
    key hash of the first (the record log files the group under it)."""

    p: int
    h: int
    e: list[bytes]


def group_bytes(events: list[bytes]) -> int:
    """The bytes of a group's events with the commas between them."""
    return sum(len(event) for event in events) + max(len(events) - 1, 0)


_WRAP: Final = msgspec.json.Encoder()
_EXCHANGED: Final = msgspec.json.Decoder(Exchanged)
_ROUTED: Final = msgspec.convert
_EVENT_OBJECTS: Final = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])  # skips values


def decode_exchanged(raw: bytes) -> Exchanged | None:
    """The routed event in a record of the log; None if the record is not one."""
    try:
        return _EXCHANGED.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class ExchangeWriter:
    """Appends deliveries of routed events to the record log of `store` (module docstring)."""

    def __init__(self, store: ObjectStore, clock: Clock, partitions: int) -> None:
        self.store, self.clock, self.partitions = store, clock, partitions
        self._producer: Producer | None = None

    def _open(self, deadline: float) -> Producer:
        timeout_s = max(deadline - self.clock.monotonic(), 0.001)
        if self._producer is None:
            self._producer = Producer(
                self.store, partitions=self.partitions, clock=self.clock, timeout_s=timeout_s
            )
        self._producer.timeout_s = timeout_s
        return self._producer

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        """Append the delivery's routed events, tagged; True if it held any. CorruptRecord,
        before anything is appended, if one of them is malformed (`_routed`)."""
        if not delivery.records:
            return False
        checked = [_routed(record, delivery, self.partitions) for record in delivery.records]
        producer = self._open(deadline)
        counts: dict[int, int] = {}
        try:
            for routed in checked:
                index = counts.get(routed.p, 0)
                counts[routed.p] = index + 1
                events = [msgspec.Raw(event) for event in routed.e]
                wrapped = Exchanged(delivery.checkpoint_id, delivery.node_id, index, events)
                await producer.send_hashed(routed.h, _WRAP.encode(wrapped))
            await producer.flush()
        except BaseException:
            self._producer = None  # drop what is buffered: the delivery is repeated whole
            raise
        return True

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        """The highest checkpoint the last event of any partition names; None if none. One
        poll of the log's index, then the segments holding those events (each read once)."""
        log = self._open(deadline).log
        if await log.layout(deadline=deadline) is None:
            return None
        partitions = range(self.partitions)
        await log.poll_ends(partitions, deadline=deadline)  # the reads below trust this poll
        through: int | None = None
        for partition in partitions:
            end = await log.known_end(partition, deadline=deadline)
            if end == 0:
                continue
            records, _ = await log.read_records(partition, end - 1, 1, deadline=deadline)
            found = decode_exchanged(bytes(records[0])) if records else None
            if found is not None and (through is None or found.c > through):
                through = found.c
        return through

    async def close(self) -> None:
        """Nothing to release."""
        self._producer = None


def _routed(record: object, delivery: Delivery, partitions: int) -> Routed:
    """The routed group `record` holds, checked whole before anything of the delivery is
    appended: CorruptRecord unless it is `{"p", "h", "e"}` with `h` a u64 key hash, `p` its
    partition of `partitions`, and `e` one or more JSON objects of at most
    ROUTED_GROUP_BYTES_MAX together."""
    what = f"job {delivery.job} checkpoint {delivery.checkpoint_id} node {delivery.node_id}"
    try:
        routed = _ROUTED(record, Routed)
    except msgspec.ValidationError as error:
        raise CorruptRecord(f"{what}: a routed event is malformed: {error}") from None
    size = group_bytes(routed.e)
    if not routed.e or size > ROUTED_GROUP_BYTES_MAX:
        raise CorruptRecord(
            f"{what}: a routed group of {len(routed.e)} events is {size} bytes; it holds 1 or "
            f"more events of at most {ROUTED_GROUP_BYTES_MAX} bytes together"
        )
    try:  # one decode for the group: each event a JSON object (values skipped)
        _EVENT_OBJECTS.decode(b"[" + b",".join(routed.e) + b"]")
    except msgspec.DecodeError as error:  # ValidationError included: not an object
        raise CorruptRecord(f"{what}: a routed event is not one JSON object: {error}") from None
    if not 0 <= routed.h <= U64_MAX or routed.p != routed.h % partitions:
        raise CorruptRecord(
            f"{what}: a routed event names partition {routed.p} for key hash {routed.h}; "
            f"the record log has {partitions} partitions"
        )
    return routed
