"""`JobProcessor`: a user's compiled job (`jobs.Program`) as the engine's `Processor`
(docs/jobs.md; the cut rules are the reference processor's, runtime/processor.py).

Per vnode it keeps the job's `VnodeRun` (every key's state, open windows, the watermark) and
the vnode's *pending* output: the `Emit`s since its last committed cut, in order.

* `process`: each event of a record log's batch is decoded (`Program.decode_event`); an event
  that is not a JSON object of the job's type goes to the dead-letter stream with its partition
  and offset (counted), the rest run through the job in order.
* `capture`: for each vnode, the job's windows close first when its vnode saw no event for
  `idle_close_s` and has read all its input (`caught_up`, the engine's: unpaused, the log's
  ends show nothing more; a vnode paused by a drain or failing to read is not idle), the end of
  a finite input (the watermark cannot move without events); the running
  aggregates flush, and the state is encoded *now* (`VnodeRun.snapshot`, synchronous: its cost
  grows with the state, docs/jobs.md "State size"); the pending output is in flight. The
  encoder, in a worker thread, encodes the in-flight records: the participant's output, which
  the leader delivers to the job's sinks once the checkpoint committed (`runtime.delivery`).
* `commit_output`: the in-flight records are history; `abort_output`: they stay pending, and
  the next cut emits them again before what came after.

The first event of each batch is checked to belong to the batch's partition by the job's key
(`key_hash(key) % 256` equals the partition modulo 256, whatever the node's vnode count): an
event log produced under another key than the job's `key_by` would
split a key's state across vnodes silently; this stops the job instead (`KeyMismatch`).

A job that cannot go on stops its node (docs/jobs.md, "Errors"): a step that raised under the
"stop" policy (`StepFailed`, naming key, partition and offset), or state that cannot be encoded
(`StateNotEncodable`, naming the key). The processor then refuses every batch and cut (so
nothing it applied after its last committed cut is ever checkpointed), logs one error line, and
calls `on_fatal`, which stops the node; a restart resumes from the last committed checkpoint.

Output bytes: msgspec msgpack of a list of `[stream, record]` pairs (`encode_output`,
`decode_output`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.clock import Clock
from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.connectors.exchange import Tag
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError, Refused
from laminar_cluster.jobs import BadEvent, Emit, Program, StateNotEncodable, StepFailed, VnodeRun
from laminar_cluster.runtime.engine_types import SourceBatch
from laminar_cluster.runtime.file_splits import FileRecords
from laminar_cluster.runtime.processor import EncodedCut
from laminar_cluster.runtime.repartition import Repartition, unwrap_state

logger: Final = logging.getLogger(__name__)


class KeyMismatch(InvalidArgument):
    """An event of the log is not in its key's vnode by the job's key (module docstring)."""


_OUTPUT_ENCODER: Final = msgspec.msgpack.Encoder()
_OUTPUT_DECODER: Final = msgspec.msgpack.Decoder(list[tuple[str, dict[str, Any]]])


def encode_output(emits: Sequence[Emit]) -> bytes:
    """The output bytes of `emits` (InvalidArgument when a record holds a non-JSON value)."""
    try:
        return _OUTPUT_ENCODER.encode([(emit.stream, emit.record) for emit in emits])
    except (TypeError, OverflowError) as error:
        raise InvalidArgument(f"job output: a record cannot be encoded: {error}") from error


def decode_output(data: bytes, *, what: str) -> list[Emit]:
    """The emits of one participant's output; CorruptRecord if `data` is not that."""
    try:
        pairs = _OUTPUT_DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise CorruptRecord(f"{what}: not a job output: {error}") from None
    return [Emit(stream, record) for stream, record in pairs]


class JobProcessor:
    """Runs `program` per vnode for the engine (module docstring)."""

    def __init__(
        self,
        program: Program,
        clock: Clock,
        *,
        idle_close_s: float | None,
        on_fatal: Callable[[LaminarError], None] | None = None,
        repartition: int | None = None,
    ) -> None:
        """`repartition`: the record log's partitions, for a job whose source is repartitioned
        (`runtime.repartition`); None for a job reading a keyed record log."""
        if idle_close_s is not None and idle_close_s <= 0:
            raise InvalidArgument(f"job idle_close_s {idle_close_s} must be positive")
        self.program, self.clock, self.idle_close_s = program, clock, idle_close_s
        self.on_fatal = on_fatal
        # Whether a vnode has read all its input (the engine's `caught_up`); none: always.
        self.caught_up: Callable[[int], bool] = lambda vnode: True
        self.failed: LaminarError | None = None  # the error that stopped the job
        self._runs: dict[int, VnodeRun] = {}
        self._pending: dict[int, list[Emit]] = {}
        self._in_flight: dict[int, int] = {}  # vnode -> how many pending emits are in flight
        self._last_event_s: dict[int, float] = {}
        self._closable: set[int] = set()  # vnodes with events since their windows last closed
        self.bad_events = 0
        self._repartition = None if repartition is None else Repartition(program, repartition)

    # -- Processor -----------------------------------------------------------------------------
    def restore(self, vnode: int, state: bytes | None) -> None:
        """Install the vnode's committed state (None: a new, empty run)."""
        seen: dict[int, Tag] = {}
        if state is not None and self._repartition is not None:
            state, seen = unwrap_state(state, what=f"job {self.program.job.name} vnode {vnode}")
        run = self.program.new_vnode() if state is None else self.program.restore_vnode(state)
        self.drop(vnode)
        if self._repartition is not None:
            self._repartition.restore(vnode, seen)
        self._runs[vnode], self._pending[vnode] = run, []
        # A restored run's windows close after idle_close_s without events, like any other.
        self._last_event_s[vnode] = self.clock.monotonic()
        if state is not None:
            self._closable.add(vnode)

    def process(self, vnode: int, partition: int, batch: SourceBatch) -> None:
        """Decode and run the batch's records; unparseable ones go to the dead letters."""
        self._check_running()
        try:
            self._process(vnode, partition, batch)
        except (StepFailed, KeyMismatch) as error:
            self._stop(error)
            raise

    def _process(self, vnode: int, partition: int, batch: SourceBatch) -> None:
        repartition = self._repartition
        if repartition is not None:
            if isinstance(batch.events, FileRecords):
                repartition.route(vnode, batch.events, self._run(vnode)[1])
                return
            batch = repartition.admit(vnode, partition, batch)
        run, out = self._run(vnode)
        program, start = self.program, batch.first_offset
        good: list[Any] = []
        checked = False
        for index, raw in enumerate(batch.events):
            try:
                good.append(program.decode_event(raw))
                if not checked:
                    checked = True
                    self._check_key(vnode, partition, batch.first_offset + index, good[-1])
            except BadEvent as error:
                if good:
                    run.process(good, partition=partition, first_offset=start, out=out)
                offset = batch.first_offset + index
                out.append(program.dead_letter_for(raw, error, partition=partition, offset=offset))
                self.bad_events += 1
                good, start = [], batch.first_offset + index + 1
        if good:
            run.process(good, partition=partition, first_offset=start, out=out)
        self._last_event_s[vnode] = self.clock.monotonic()
        self._closable.add(vnode)

    def _check_key(self, vnode: int, partition: int, offset: int, event: Any) -> None:
        """KeyMismatch unless the job's key of `event` belongs to `partition`: a record log
        has a multiple of 256 partitions, so a key's partition modulo 256 is
        `key_hash(key) % 256` whatever the partition count, and a node of any vnode count
        reads every partition of its vnodes whole (`vnode` names it in the message)."""
        try:
            key = self.program.key_of(event)
        except Exception:  # the user's key function: its failure is the run's to report
            return
        home = key_hash(key) % VNODE_COUNT
        if home != partition % VNODE_COUNT:
            raise KeyMismatch(
                f"job {self.program.job.name}: the event at partition {partition} (vnode "
                f"{vnode}), offset {offset} has key {key!r}, whose partition is {home} modulo "
                f"{VNODE_COUNT}, not {partition % VNODE_COUNT}: it was produced under another "
                "key than the job's key_by; produce with the job's key"
            )

    def capture(self, vnodes: Sequence[int]) -> Callable[[], EncodedCut]:
        """Close idle windows, flush, encode each vnode's state now; its output goes in flight."""
        self._check_running()
        try:
            return self._capture(vnodes)
        except StateNotEncodable as error:
            self._stop(error)
            raise

    def _capture(self, vnodes: Sequence[int]) -> Callable[[], EncodedCut]:
        states: dict[int, bytes] = {}
        records: list[Emit] = []
        for vnode in vnodes:
            run, out = self._run(vnode)
            if self._idle(vnode):
                run.close_windows(out)
                self._closable.discard(vnode)
            run.flush(out)
            states[vnode] = run.snapshot()
            if self._repartition is not None:
                states[vnode] = self._repartition.capture(vnode, states[vnode])
            self._in_flight[vnode] = len(out)
            records.extend(out)

        def encode() -> EncodedCut:
            return EncodedCut(states=states, output=encode_output(records))

        return encode

    def commit_output(self, vnode: int) -> None:
        """The in-flight emits are history."""
        count = self._in_flight.pop(vnode, 0)
        if self._repartition is not None:
            self._repartition.resolved(vnode, committed=True)
        pending = self._pending.get(vnode)
        if pending is not None and count:
            del pending[:count]

    def abort_output(self, vnode: int) -> None:
        """The in-flight emits stay pending (the next cut emits them again)."""
        self._in_flight.pop(vnode, None)
        if self._repartition is not None:
            self._repartition.resolved(vnode, committed=False)

    def drop(self, vnode: int) -> None:
        """Forget the vnode."""
        self._runs.pop(vnode, None)
        self._pending.pop(vnode, None)
        self._in_flight.pop(vnode, None)
        self._last_event_s.pop(vnode, None)
        self._closable.discard(vnode)
        if self._repartition is not None:
            self._repartition.dropped(vnode)

    def routing_room(self) -> bool:
        """Whether file records may be read (a repartitioned job's pending routed events are
        under their budget, `repartition.ROUTED_PENDING_BYTES_MAX`)."""
        return self._repartition is None or self._repartition.room

    def quiescent(self) -> bool:
        """False while a vnode's windows are due to close (idle for `idle_close_s`)."""
        return not any(self._idle(vnode) for vnode in self._closable)

    # -- figures -------------------------------------------------------------------------------
    def figures(self) -> dict[str, int]:
        """Late events and dead letters of the vnodes held now, and unparseable events."""
        runs = self._runs.values()
        routed = 0 if self._repartition is None else self._repartition.dead_letters
        return {
            "late_events": sum(run.late_events for run in runs),
            "dead_letters": sum(run.dead_letters for run in runs) + self.bad_events + routed,
            "bad_events": self.bad_events,
        }

    def _check_running(self) -> None:
        if self.failed is not None:
            raise Refused(f"job {self.program.job.name} stopped: {self.failed}")

    def _stop(self, error: LaminarError) -> None:
        """Refuse everything from now on and stop the node."""
        if self.failed is None:
            self.failed = error
            logger.error(
                "job %s stops: %s; fix the job and restart the node (it resumes from the last "
                "committed checkpoint)",
                self.program.job.name,
                error,
            )
            if self.on_fatal is not None:
                self.on_fatal(error)

    def _run(self, vnode: int) -> tuple[VnodeRun, list[Emit]]:
        run = self._runs.get(vnode)
        if run is None:  # the engine restores every vnode before use; be safe anyway
            run = self._runs[vnode] = self.program.new_vnode()
            self._pending[vnode] = []
        return run, self._pending[vnode]

    def _idle(self, vnode: int) -> bool:
        last_s = self._last_event_s.get(vnode)
        if self.idle_close_s is None or last_s is None or vnode not in self._closable:
            return False
        return self.clock.monotonic() - last_s >= self.idle_close_s and self.caught_up(vnode)
