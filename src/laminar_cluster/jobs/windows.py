"""Event-time windows: `Tumbling`, `Sliding` and `Session`; the rules every window follows.

Event time is an `int` of milliseconds read by the job's `.event_time(fn, out_of_orderness_ms)`
from each source event; a step's outputs carry the time of the event that produced them.

* **Watermark** (per `VnodeRun`): the greatest event time of the events it processed
  successfully, minus `out_of_orderness_ms`. It never goes back, and it is None before the
  first event. `close_windows` (end of input) sets it to `WATERMARK_CLOSED_MS` (2**63 - 1).
* **Tumbling(size_ms)**: windows `[k*size, (k+1)*size)`, aligned to epoch 0; each event is in
  exactly one. **Sliding(size_ms, slide_ms)**: windows `[k*slide, k*slide + size)`; each event
  is in `size/slide` of them (size must be a multiple of slide).
* A window `[start, end)` is **emitted once**, when the watermark reaches
  `end + allowed_lateness_ms`, with its aggregates: `{<key name>: key, "window_start_ms": start,
  "window_end_ms": end, <aggregation name>: value, ...}`. An event goes to every window that
  contains it and is not emitted yet (`end + allowed_lateness_ms > watermark` when it arrives).
  An event with no such window is **late**: it goes, as it is (converted to builtins), to the
  "late" stream and is counted in `VnodeRun.late_events`, never dropped silently.
* **Session(gap_ms)**: per key, an event at `t` spans `[t, t + gap)`; spans that overlap merge
  into one session `[first, last + gap)`. A session is emitted when the watermark reaches
  `last + gap + allowed_lateness_ms` (its `window_end_ms` is `last + gap`). An event with
  `t + gap + allowed_lateness_ms <= watermark` is late. A session that was emitted is gone: a
  later, not-late event within its gap starts a new session (as Flink does).
* Windows due at the same moment are emitted in ascending end; sessions of equal end in the
  order of their keys' canonical encoding (`assignment.vnode.encode_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias

from laminar_cluster.errors import InvalidArgument

WATERMARK_CLOSED_MS: Final = 2**63 - 1


def _positive(what: str, value: object) -> int:
    if type(value) is not int or value <= 0:
        raise InvalidArgument(f"{what} is {value!r}; pass a positive int of milliseconds")
    return value


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Fixed, non-overlapping windows of `size_ms`, aligned to epoch 0."""

    size_ms: int
    kind: ClassVar[str] = "tumbling"

    def __post_init__(self) -> None:
        _positive("Tumbling size_ms", self.size_ms)

    @property
    def slide_ms(self) -> int:
        """A tumbling window slides by its size."""
        return self.size_ms

    def describe(self) -> str:
        """One line: the kind and size."""
        return f"tumbling:{self.size_ms}"


@dataclass(frozen=True, slots=True)
class Sliding:
    """Windows of `size_ms` starting every `slide_ms` (size a multiple of slide), epoch 0."""

    size_ms: int
    slide_ms: int
    kind: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        _positive("Sliding size_ms", self.size_ms)
        _positive("Sliding slide_ms", self.slide_ms)
        if self.size_ms % self.slide_ms:
            raise InvalidArgument(
                f"Sliding size_ms {self.size_ms} is not a multiple of slide_ms {self.slide_ms}; "
                "pick a size that is"
            )

    def describe(self) -> str:
        """One line: the kind, size and slide."""
        return f"sliding:{self.size_ms}:{self.slide_ms}"


@dataclass(frozen=True, slots=True)
class Session:
    """Per-key sessions: events closer than `gap_ms` in event time share a session."""

    gap_ms: int
    kind: ClassVar[str] = "session"

    def __post_init__(self) -> None:
        _positive("Session gap_ms", self.gap_ms)

    def describe(self) -> str:
        """One line: the kind and gap."""
        return f"session:{self.gap_ms}"


Window: TypeAlias = Tumbling | Sliding | Session


def window_starts(ts_ms: int, size_ms: int, slide_ms: int) -> range:
    """The starts, ascending, of the aligned windows `[s, s + size)` that contain `ts_ms`."""
    last = ts_ms - ts_ms % slide_ms
    return range(last - size_ms + slide_ms, last + 1, slide_ms)
