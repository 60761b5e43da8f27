"""`VnodeRun`: one vnode's state of a job and the loop that feeds it events.

Per event, in offset order: the key (`key_fn`, must be str, bytes, int or a tuple of them),
the event time (`event_time_fn`, an int of ms, when the job has one), the steps in order (each
sees every output of the one before, with the same key), then the terminal operator. Either all
of that succeeds and the event's effects are applied together, or the first raising user
function sends the event to the "dead_letter" stream (`{"job", "partition", "offset", "key":
repr(key) or None, "error": "<ExcType>: <msg>", "event": <the event as JSON text>}`), counted in
`dead_letters`, every state unchanged (a step that mutates its state in place and then raises
is the exception: return a new state instead). Under `on_error("stop")` it raises `StepFailed`.

After a successful event with a time, the watermark becomes `max(watermark, ts -
out_of_orderness_ms)` and the windows it made due are emitted (`jobs.windows`); dead letters
do not move it. `flush` (every checkpoint cut) emits running aggregates; `close_windows` (end of
input) emits every open window and makes every later windowed event late. `snapshot` holds
everything, so `restore_vnode(run.snapshot())` continues exactly as `run` would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from laminar_cluster.errors import CorruptRecord
from laminar_cluster.jobs.api import DEAD_LETTER, MAIN, Emit
from laminar_cluster.jobs.errors import StepFailed
from laminar_cluster.jobs.operators import StepOp
from laminar_cluster.jobs.records import as_record, check_key, event_text
from laminar_cluster.jobs.snapshot import (
    SNAPSHOT_VERSION,
    VnodeSnapshot,
    decode_snapshot,
    decode_states,
    encode_snapshot,
    encode_states,
)
from laminar_cluster.jobs.terminals import Terminal
from laminar_cluster.jobs.windows import WATERMARK_CLOSED_MS

_TS_MIN: Final = -(2**62)
_TS_MAX: Final = 2**62
_MISSING: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class Plan:
    """What a `VnodeRun` runs: the compiled form of a job (built by `Program`)."""

    job_name: str
    fingerprint: str
    key_fn: Callable[[Any], Any]
    time_fn: Callable[[Any], Any] | None
    out_of_orderness_ms: int
    steps: tuple[StepOp, ...]
    state_decoders: tuple[msgspec.msgpack.Decoder[list[tuple[Any, Any]]], ...]
    make_terminal: Callable[[], Terminal]
    stop_on_error: bool


class VnodeRun:
    """One vnode's state of a job (see the module docstring). Make it with `Program`."""

    watermark_ms: int | None
    events: int
    dead_letters: int

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self.watermark_ms = None
        self.events = 0
        self.dead_letters = 0
        self._terminal = plan.make_terminal()
        self._states: list[dict[Any, Any]] = [{} for _ in plan.steps]
        self._apply: Callable[[Any, int | None, Any, int | None, list[Emit]], None]
        if not plan.steps:
            self._apply = self._terminal.apply_one
        elif len(plan.steps) == 1 and type(self._terminal) is Terminal:
            self._apply = self._one_step_to_main
        else:
            self._apply = self._steps

    @property
    def late_events(self) -> int:
        """Events (or step outputs) sent to the "late" stream so far."""
        return self._terminal.late_events

    def process(
        self, events: Sequence[Any], *, partition: int, first_offset: int, out: list[Emit]
    ) -> None:
        """Run decoded `events` (offsets first_offset, first_offset + 1, ...), appending emits."""
        plan, terminal, apply = self._plan, self._terminal, self._apply
        key_fn, time_fn, lag = plan.key_fn, plan.time_fn, plan.out_of_orderness_ms
        self.events += len(events)
        ts = None
        for index, event in enumerate(events):
            key = None
            try:
                key = key_fn(event)
                kind = type(key)
                if kind is not str and kind is not int and kind is not bytes:
                    check_key(key)
                if time_fn is not None:
                    ts = time_fn(event)
                    if type(ts) is not int or not _TS_MIN <= ts <= _TS_MAX:
                        raise TypeError(f"event time {ts!r} is not an int of ms within 2**62")
                apply(key, ts, event, self.watermark_ms, out)
            except Exception as error:
                self._failed(error, event, key, partition, first_offset + index, out)
                continue
            if ts is not None:
                mark = ts - lag
                watermark = self.watermark_ms
                if watermark is None or mark > watermark:
                    self.watermark_ms = mark
                    fire_at = terminal.fire_at
                    if fire_at is not None and mark >= fire_at:
                        terminal.fire(mark, out)

    def flush(self, out: list[Emit]) -> None:
        """At a checkpoint cut: running aggregates emit the keys changed since the last flush."""
        self._terminal.flush(out)

    def close_windows(self, out: list[Emit]) -> None:
        """End of input: emit every open window; the watermark becomes WATERMARK_CLOSED_MS."""
        self.watermark_ms = WATERMARK_CLOSED_MS
        if self._terminal.fire_at is not None:
            self._terminal.fire(WATERMARK_CLOSED_MS, out)

    def snapshot(self) -> bytes:
        """Everything this run holds, as versioned msgpack; StateNotEncodable names the key."""
        name = self._plan.job_name
        steps = [
            encode_states(states, f"job {name} step {number}")
            for number, states in enumerate(self._states, start=1)
        ]
        return encode_snapshot(
            VnodeSnapshot(
                version=SNAPSHOT_VERSION,
                fingerprint=self._plan.fingerprint,
                watermark_ms=self.watermark_ms,
                events=self.events,
                late_events=self.late_events,
                dead_letters=self.dead_letters,
                steps=steps,
                terminal=self._terminal.dump(),
            )
        )

    def _one_step_to_main(
        self, key: Any, ts: int | None, event: Any, wm: int | None, out: list[Emit]
    ) -> None:
        states, step = self._states[0], self._plan.steps[0]
        state = states.get(key, _MISSING)
        if state is _MISSING:
            state = step.initial()
        state, outputs = step.fn(state, event)
        if outputs:
            records = [o if type(o) is dict else as_record(o) for o in outputs]
            states[key] = state
            out.extend([Emit(MAIN, record) for record in records])
        else:
            states[key] = state

    def _steps(self, key: Any, ts: int | None, event: Any, wm: int | None, out: list[Emit]) -> None:
        items: list[Any] = [event]
        new_states = []
        for step, states in zip(self._plan.steps, self._states, strict=True):
            state = states.get(key, _MISSING)
            if state is _MISSING:
                state = step.initial()
            produced: list[Any] = []
            for item in items:
                state, outputs = step.fn(state, item)
                if outputs:
                    produced.extend(outputs)
            new_states.append(state)
            items = produced
        self._terminal.apply_many(key, ts, items, wm, out)
        for states, state in zip(self._states, new_states, strict=True):
            states[key] = state

    def _failed(
        self, error: Exception, event: Any, key: Any, partition: int, offset: int, out: list[Emit]
    ) -> None:
        name = self._plan.job_name
        what = f"{type(error).__name__}: {' '.join(str(error).splitlines())}"
        if self._plan.stop_on_error:
            raise StepFailed(
                f"job {name}: partition {partition} offset {offset} key {key!r}: {what}",
                job=name,
                key=key,
                partition=partition,
                offset=offset,
            ) from error
        self.dead_letters += 1
        record = {
            "job": name,
            "partition": partition,
            "offset": offset,
            "key": None if key is None else repr(key),
            "error": what,
            "event": event_text(event),
        }
        out.append(Emit(DEAD_LETTER, record))


def restore_run(plan: Plan, data: bytes) -> VnodeRun:
    """The `VnodeRun` a snapshot of `plan`'s job holds; CorruptRecord if it is not one."""
    what = f"job {plan.job_name} vnode snapshot"
    snapshot = decode_snapshot(data, what)
    if snapshot.fingerprint != plan.fingerprint:
        raise CorruptRecord(
            f"{what}: it is of job {snapshot.fingerprint!r}, not {plan.fingerprint!r}"
        )
    if len(snapshot.steps) != len(plan.steps):
        raise CorruptRecord(
            f"{what}: it holds {len(snapshot.steps)} steps; the job has {len(plan.steps)}"
        )
    run = VnodeRun(plan)
    run._states = [
        decode_states(data, decoder, what)
        for data, decoder in zip(snapshot.steps, plan.state_decoders, strict=True)
    ]
    run._terminal.load(snapshot.terminal, what)
    run._terminal.late_events = snapshot.late_events
    run.watermark_ms = snapshot.watermark_ms
    run.events = snapshot.events
    run.dead_letters = snapshot.dead_letters
    return run
