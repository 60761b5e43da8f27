"""The two stages of a job whose source is repartitioned (a `FileSource`; docs/jobs.md, "File
sources"), as `JobProcessor` runs them.

* `route` (first stage, a split batch): each file record is decoded as the job's event, passed
  through the job's `.flat_map` and keyed; the events are emitted grouped per record log
  partition of their keys, as `EXCHANGE` records (`connectors.exchange`). A record the job
  cannot decode, or a user function that raises, is a dead letter (or, under
  `on_error("stop")`, `StepFailed`); its dead letter has partition -1, its record number in the
  file as offset, and the file's name in the error.
* `admit` (second stage, a record log batch): each routed group is unwrapped into its events,
  and skipped when its tag `(checkpoint, node, index)` is not above the last one applied in its
  partition (a delivery appended again); `seen` is that tag per partition, cut with the vnode's
  state (`wrap_state`), so a restore resumes with the offsets and the tags of one cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.connectors.exchange import (
    EXCHANGE,
    ROUTED_GROUP_BYTES_MAX,
    Tag,
    decode_exchanged,
)
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.jobs import BadEvent, Emit, Program, StepFailed
from laminar_cluster.runtime.engine_types import SourceBatch
from laminar_cluster.runtime.file_splits import FileRecords

_EVENT: Final = msgspec.json.Encoder()
# Routed events' bytes a node holds pending (not yet committed) before it reads no more file
# records: well under the 48 MiB output of one participant in one checkpoint
# (`coordinator.objects.MAX_OUTPUT_BYTES`), which a cut over it would exceed for good.
ROUTED_PENDING_BYTES_MAX: Final = 16 * 1024 * 1024
ROUTED_RECORD_OVERHEAD_BYTES: Final = 48  # what output encoding adds to a routed group


class RepartitionState(msgspec.Struct, frozen=True):
    """A vnode's state in a repartitioned job: the job's run and the last tag per partition."""

    version: int
    run: bytes
    seen: list[tuple[int, int, int, int]]  # (partition, checkpoint, node, index)


_STATE_ENCODER: Final = msgspec.msgpack.Encoder()
_STATE_DECODER: Final = msgspec.msgpack.Decoder(RepartitionState)


@dataclass(slots=True)
class _Routing:
    """A vnode's part in the repartition: the last tag applied per record log partition, and
    the routed bytes not yet committed (of those, the ones in the cut in flight)."""

    seen: dict[int, Tag] = field(default_factory=dict)
    pending_bytes: int = 0
    flight_bytes: int = 0


class _Dead(Exception):
    """A record that becomes a dead letter: the error and the key, if one was computed."""

    def __init__(self, error: Exception, key: Any) -> None:
        super().__init__(str(error))
        self.error, self.key = error, key


class _Groups:
    """The routed events of one batch, grouped per partition in order: a group is emitted
    when the next event would take it past ROUTED_GROUP_BYTES_MAX, and at `close`."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.emits: list[Emit] = []
        self._open: dict[int, tuple[int, list[bytes], int]] = {}  # p -> (hash, events, bytes)
        self._bytes = 0

    def add(self, hashed: int, body: bytes) -> None:
        partition = hashed % self.partitions
        found = self._open.get(partition)
        if found is not None and found[2] + 1 + len(body) > ROUTED_GROUP_BYTES_MAX:
            self._emit(partition, found)
            found = None
        if found is None:
            self._open[partition] = (hashed, [body], len(body))
        else:
            found[1].append(body)
            self._open[partition] = (found[0], found[1], found[2] + 1 + len(body))

    def _emit(self, partition: int, group: tuple[int, list[bytes], int]) -> None:
        del self._open[partition]
        self._bytes += group[2] + ROUTED_RECORD_OVERHEAD_BYTES
        self.emits.append(Emit(EXCHANGE, {"p": partition, "h": group[0], "e": group[1]}))

    def close(self) -> int:
        """Emit every open group; the bytes of all the groups emitted."""
        for partition, group in list(self._open.items()):
            self._emit(partition, group)
        return self._bytes


def wrap_state(run: bytes, seen: dict[int, Tag]) -> bytes:
    """The vnode's state bytes: the run's snapshot and its tags."""
    tags = [(p, *tag) for p, tag in sorted(seen.items())]
    return _STATE_ENCODER.encode(RepartitionState(version=1, run=run, seen=tags))


def unwrap_state(data: bytes, *, what: str) -> tuple[bytes, dict[int, Tag]]:
    """The run's snapshot and the tags of `wrap_state`; CorruptRecord if it is not that."""
    try:
        state = _STATE_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise CorruptRecord(f"{what}: not a repartitioned job's vnode state: {error}") from None
    if state.version != 1:
        raise CorruptRecord(f"{what}: vnode state version {state.version}, expected 1")
    return state.run, {p: (c, n, i) for p, c, n, i in state.seen}


class Repartition:
    """Routing and admission for `program` through a record log of `partitions` partitions."""

    def __init__(self, program: Program, partitions: int) -> None:
        self.program, self.partitions = program, partitions
        self.stop_on_error = program.job.error_policy == "stop"
        self.dead_letters = 0
        assert program.job.key_fn is not None  # compile_job checked it
        self._key_fn = program.job.key_fn
        self._vnodes: dict[int, _Routing] = {}

    @property
    def room(self) -> bool:
        """Whether the node may route more (its pending routed bytes are under the budget)."""
        return sum(r.pending_bytes for r in self._vnodes.values()) < ROUTED_PENDING_BYTES_MAX

    def restore(self, vnode: int, seen: dict[int, Tag]) -> None:
        """The vnode starts from a cut's tags (`unwrap_state`), nothing routed pending."""
        self._vnodes[vnode] = _Routing(seen=seen)

    def capture(self, vnode: int, run: bytes) -> bytes:
        """The vnode's state at a cut (its run's and its tags); everything it routed so far
        is in the cut's output."""
        routing = self._routing(vnode)
        routing.flight_bytes = routing.pending_bytes
        return wrap_state(run, routing.seen)

    def resolved(self, vnode: int, committed: bool) -> None:
        """The cut of `vnode` committed (its routed bytes are history) or aborted."""
        routing = self._routing(vnode)
        if committed:
            routing.pending_bytes -= routing.flight_bytes
        routing.flight_bytes = 0

    def dropped(self, vnode: int) -> None:
        """`vnode` is gone from this node."""
        self._vnodes.pop(vnode, None)

    def _routing(self, vnode: int) -> _Routing:
        found = self._vnodes.get(vnode)
        if found is None:  # the engine restores every vnode before use; be safe anyway
            found = self._vnodes[vnode] = _Routing()
        return found

    def route(self, vnode: int, batch: FileRecords, out: list[Emit]) -> None:
        """Emit the batch's events to their keys' partitions, grouped per partition (module
        docstring); the groups follow the batch's dead letters in `out`. A record whose
        `.flat_map` or key raises routes none of its events."""
        groups = _Groups(self.partitions)
        add, decode, events_of = groups.add, self.program.decode_event, self._events_of
        for index, raw in enumerate(batch.records):
            try:
                event = decode(raw)
            except BadEvent as error:
                self._dead(batch.file, batch.first_record + index, raw, error, None, out)
                continue
            try:
                for hashed, body in events_of(event):
                    add(hashed, body)
            except _Dead as dead:
                self._dead(batch.file, batch.first_record + index, raw, dead.error, dead.key, out)
        self._routing(vnode).pending_bytes += groups.close()
        out.extend(groups.emits)

    def _events_of(self, event: Any) -> list[tuple[int, bytes]]:
        """(key hash, JSON) of each event `event` becomes; _Dead if a user function raises."""
        key_fn, encode, routed = self._key_fn, _EVENT.encode, []
        key: Any = None
        try:
            for item in self.program.flat_map(event):
                key = key_fn(item)
                body = encode(item)
                if len(body) > ROUTED_GROUP_BYTES_MAX or body[:1] != b"{":
                    raise TypeError(
                        f"an event of {len(body)} bytes is not a JSON object of at most "
                        f"{ROUTED_GROUP_BYTES_MAX}"
                    )
                routed.append((key_hash(key), body))  # InvalidArgument for no key
        except Exception as error:  # the user's functions: their failure is a dead letter
            raise _Dead(error, key) from None
        return routed

    def _dead(
        self, file: str, number: int, raw: bytes, error: Exception, key: Any, out: list[Emit]
    ) -> None:
        where = f"file {file} record {number}: "
        if self.stop_on_error and not isinstance(error, BadEvent):
            name = self.program.job.name
            raise StepFailed(
                f"job {name}: {where}{type(error).__name__}: {error}",
                job=name,
                key=key,
                partition=-1,
                offset=number,
            ) from error
        self.dead_letters += 1
        out.append(
            self.program.dead_letter_for(
                raw, error, partition=-1, offset=number, key=key, where=where
            )
        )

    def admit(self, vnode: int, partition: int, batch: SourceBatch) -> SourceBatch:
        """The batch's routed events not applied before, unwrapped; the partition's last tag
        moves on. A record that is not a routed event is kept as it is (the job sends it to
        its dead letters)."""
        seen = self._routing(vnode).seen
        last = seen.get(partition)
        kept: list[bytes] = []
        for raw in batch.events:
            found = decode_exchanged(bytes(raw))
            if found is None:
                kept.append(bytes(raw))
                continue
            tag = found.tag
            if last is not None and tag <= last:
                continue  # a delivery appended again: applied already
            last = tag
            kept.extend(bytes(event) for event in found.e)
        if last is not None:
            seen[partition] = last
        return SourceBatch(batch.first_offset, batch.next_offset, kept)
