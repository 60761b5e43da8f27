"""The job builder (`Job`) and what it refers to: source and sink declarations, emits, streams.

A job is one source, one key, a chain of keyed operators and one or more sinks:

    job = (
        Job("clicks")
        .source(source)                                  # a SourceSpec
        .events(Click)                                   # optional msgspec Struct; default dict
        .key_by(lambda e: e["user"], name="user")
        .event_time(lambda e: e["ts_ms"], out_of_orderness_ms=5_000)
        .window(Tumbling(size_ms=60_000), Count(), allowed_lateness_ms=10_000)
        .sink(sink)                                      # a SinkSpec; .stream picks main/late/...
    )

Every method returns a new frozen `Job` and checks its arguments at once (`InvalidArgument`,
one line saying what to do). The chain is any number of `.step(...)` followed optionally by one
terminal `.aggregate(...)` or `.window(...)`; a step's outputs are the next operator's events
(same key, same event time); if the chain ends in a step, its outputs are the main output.
`compile_job` checks completeness. Emitted records go to one of three streams: `MAIN`, `LATE`
(events too late for their windows) and `DEAD_LETTER` (events that could not be parsed or whose
user function raised, under the default `on_error("dead_letter")`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple

import msgspec

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.jobs.aggregations import Aggregation
from laminar_cluster.jobs.operators import AggregateOp, Operator, StepOp, WindowOp
from laminar_cluster.jobs.windows import Window

MAIN: Final = "main"
LATE: Final = "late"
DEAD_LETTER: Final = "dead_letter"
STREAMS: Final = (MAIN, LATE, DEAD_LETTER)
ERROR_POLICIES: Final = ("dead_letter", "stop")
WINDOW_COLUMNS: Final = ("window_start_ms", "window_end_ms")

_NAME = re.compile(r"[a-z0-9_-]{1,64}")


class Emit(NamedTuple):
    """One output record and the stream it goes to (`MAIN`, `LATE` or `DEAD_LETTER`)."""

    stream: str
    record: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """Base of every source declaration (connectors subclass it as frozen dataclasses).
    `repartitioned`: whether the source's events reach their keys' owners through a
    repartition (a source not partitioned by the job's key); only then may a job `.flat_map`."""

    repartitioned: ClassVar[bool] = False

    def describe(self) -> str:
        """One line for logs."""
        return type(self).__name__


@dataclass(frozen=True, kw_only=True)
class SinkSpec:
    """Base of every sink declaration: `stream` is the Emit stream it receives.

    Connectors subclass it as frozen dataclasses (fields of the subclass may be positional).
    """

    stream: str = MAIN

    def describe(self) -> str:
        """One line for logs."""
        return f"{type(self).__name__}(stream={self.stream})"


@dataclass(frozen=True, slots=True)
class Job:
    """A job declaration, built by chaining its methods (see the module docstring)."""

    name: str
    source_spec: SourceSpec | None = None
    event_type: type[msgspec.Struct] | None = None
    flat_map_fn: Callable[[Any], Any] | None = None
    key_fn: Callable[[Any], Any] | None = None
    key_name: str = "key"
    event_time_fn: Callable[[Any], int] | None = None
    out_of_orderness_ms: int = 0
    operators: tuple[Operator, ...] = ()
    sinks: tuple[SinkSpec, ...] = ()
    error_policy: str = "dead_letter"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidArgument(
                f"job name {self.name!r} is not 1-64 of a-z, 0-9, '_' and '-'; rename it"
            )

    def _fail(self, message: str) -> InvalidArgument:
        return InvalidArgument(f"job {self.name}: {message}")

    def source(self, spec: SourceSpec) -> Job:
        """The job's one source (a `SourceSpec`)."""
        if not isinstance(spec, SourceSpec):
            raise self._fail(f"source {spec!r} is not a SourceSpec; pass a source declaration")
        if self.source_spec is not None:
            raise self._fail("has a source already; call .source(...) once")
        return dataclasses.replace(self, source_spec=spec)

    def events(self, event_type: type[msgspec.Struct]) -> Job:
        """Decode each event as `event_type` (a msgspec Struct) instead of a dict."""
        if not (isinstance(event_type, type) and issubclass(event_type, msgspec.Struct)):
            raise self._fail(f"events type {event_type!r} is not a msgspec.Struct subclass")
        if self.event_type is not None:
            raise self._fail("has an event type already; call .events(...) once")
        return dataclasses.replace(self, event_type=event_type)

    def flat_map(self, fn: Callable[[Any], Any]) -> Job:
        """Turn each event into any number of events, `fn(event) -> iterable of events` (JSON
        objects or Structs), before the key: e.g. a line of text into its words. Only for a
        source the cluster repartitions by key (`FileSource`); call it before `.key_by`."""
        _callable(self, "flat_map", fn)
        if self.flat_map_fn is not None:
            raise self._fail("has a flat_map already; call .flat_map(...) once")
        if self.key_fn is not None:
            raise self._fail("call .flat_map(...) before .key_by(...): it runs before the key")
        return dataclasses.replace(self, flat_map_fn=fn)

    def key_by(self, fn: Callable[[Any], Any], *, name: str = "key") -> Job:
        """The key of each event, `fn(event) -> str | bytes | int`; `name` is its output column."""
        _callable(self, "key_by", fn)
        if not isinstance(name, str) or not name:
            raise self._fail(f"key column name {name!r} is not a non-empty str")
        if self.key_fn is not None:
            raise self._fail("has a key already; call .key_by(...) once")
        return dataclasses.replace(self, key_fn=fn, key_name=name)

    def event_time(self, fn: Callable[[Any], int], *, out_of_orderness_ms: int = 0) -> Job:
        """Each event's time, `fn(event) -> int` ms; the watermark lags it by out_of_orderness."""
        _callable(self, "event_time", fn)
        if type(out_of_orderness_ms) is not int or out_of_orderness_ms < 0:
            raise self._fail(f"out_of_orderness_ms {out_of_orderness_ms!r} is not an int >= 0")
        if self.event_time_fn is not None:
            raise self._fail("has an event time already; call .event_time(...) once")
        return dataclasses.replace(self, event_time_fn=fn, out_of_orderness_ms=out_of_orderness_ms)

    def step(
        self,
        fn: Callable[[Any, Any], Any],
        *,
        initial: Callable[[], Any] = lambda: None,
        state_type: Any = Any,
    ) -> Job:
        """A keyed step `fn(state, event) -> (new_state, outputs)`; state starts as `initial()`.

        `state_type` is what a restored snapshot decodes the state as (msgspec types).
        """
        self._chain_open("step")
        _callable(self, "step", fn)
        _callable(self, "step initial", initial)
        return self._with(StepOp(fn=fn, initial=initial, state_type=state_type))

    def aggregate(self, *aggregations: Aggregation) -> Job:
        """Running per-key aggregates, emitted for changed keys at each flush (terminal)."""
        self._chain_open("aggregate")
        self._check_aggregations("aggregate", aggregations, ())
        return self._with(AggregateOp(aggregations=aggregations))

    def window(
        self, window: Window, *aggregations: Aggregation, allowed_lateness_ms: int = 0
    ) -> Job:
        """Per-key aggregates over event-time windows (terminal; see `jobs.windows`)."""
        self._chain_open("window")
        if self.event_time_fn is None:
            raise self._fail("a window needs event time; call .event_time(...) before .window(...)")
        if not isinstance(window, Window):
            raise self._fail(f"window {window!r} is not a Tumbling, Sliding or Session")
        if type(allowed_lateness_ms) is not int or allowed_lateness_ms < 0:
            raise self._fail(f"allowed_lateness_ms {allowed_lateness_ms!r} is not an int >= 0")
        self._check_aggregations("window", aggregations, WINDOW_COLUMNS)
        return self._with(WindowOp(window, aggregations, allowed_lateness_ms))

    def sink(self, spec: SinkSpec) -> Job:
        """Send the records of `spec.stream` to `spec` (a `SinkSpec`); call once per sink."""
        if not isinstance(spec, SinkSpec):
            raise self._fail(f"sink {spec!r} is not a SinkSpec; pass a sink declaration")
        if spec.stream not in STREAMS:
            raise self._fail(f"sink stream {spec.stream!r} is not one of {', '.join(STREAMS)}")
        return dataclasses.replace(self, sinks=(*self.sinks, spec))

    def on_error(self, policy: str) -> Job:
        """What a raising user function does: "dead_letter" (default) or "stop"."""
        if policy not in ERROR_POLICIES:
            raise self._fail(f"error policy {policy!r} is not 'dead_letter' or 'stop'")
        return dataclasses.replace(self, error_policy=policy)

    def _with(self, operator: Operator) -> Job:
        return dataclasses.replace(self, operators=(*self.operators, operator))

    def _chain_open(self, method: str) -> None:
        if self.key_fn is None:
            raise self._fail(f"an operator needs a key; call .key_by(...) before .{method}(...)")
        if self.operators and not isinstance(self.operators[-1], StepOp):
            raise self._fail(
                f"the chain ended with .aggregate/.window; no .{method}(...) after it "
                "(only .step(...) may come before them)"
            )

    def _check_aggregations(
        self, method: str, aggregations: tuple[Aggregation, ...], reserved: tuple[str, ...]
    ) -> None:
        if not aggregations:
            raise self._fail(f".{method}(...) needs at least one aggregation, e.g. Count()")
        seen = {self.key_name, *reserved}
        for aggregation in aggregations:
            if not isinstance(aggregation, Aggregation):
                raise self._fail(f"{aggregation!r} is not an aggregation (Count, Sum, ...)")
            if aggregation.name in seen:
                raise self._fail(
                    f"output column {aggregation.name!r} is taken; give the aggregation "
                    "another name="
                )
            seen.add(aggregation.name)


def _callable(job: Job, what: str, fn: object) -> None:
    if not callable(fn):
        raise InvalidArgument(f"job {job.name}: {what} function {fn!r} is not callable")
