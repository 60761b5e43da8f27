"""The last operator of a chain, holding its per-vnode state: main output, running aggregates,
aligned (tumbling/sliding) windows, session windows (semantics: `jobs.windows`).

Each terminal's `apply_one(key, ts, event, wm, out)` / `apply_many(key, ts, items, wm, out)`
is atomic: it either raises before changing anything or applies the event(s) fully. `fire`
emits what the watermark made due, `fire_at` is the least watermark at which `fire` may emit
(None: nothing pending), `flush` emits running aggregates, and `dump` / `load` move the state
in and out of a snapshot (plain msgpack values; keys as [key, ...] pairs, never map keys).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from laminar_cluster.assignment.vnode import Key
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.jobs.aggregations import Aggregation
from laminar_cluster.jobs.api import LATE, MAIN, Emit
from laminar_cluster.jobs.records import as_builtins, as_record, key_from_snapshot, key_order
from laminar_cluster.jobs.windows import window_starts

_Pairs = list[tuple[Any, list[Any]]]


def _load(data: Any, kind: Any, what: str) -> Any:
    try:
        return msgspec.convert(data, type=kind)
    except msgspec.ValidationError as error:
        raise CorruptRecord(f"{what}: snapshot state is malformed: {error}") from None


class Terminal:
    """Base: the main output of a chain that ends in a step (records as the step returned)."""

    fire_at: int | None = None
    late_events: int = 0

    def apply_one(
        self, key: Key, ts: int | None, event: Any, wm: int | None, out: list[Emit]
    ) -> None:
        """Apply one event (atomic)."""
        self.apply_many(key, ts, (event,), wm, out)

    def apply_many(
        self, key: Key, ts: int | None, items: Sequence[Any], wm: int | None, out: list[Emit]
    ) -> None:
        """Apply the events one input event became (atomic)."""
        records = [as_record(item) for item in items]
        out.extend([Emit(MAIN, record) for record in records])

    def fire(self, wm: int, out: list[Emit]) -> None:
        """Emit what watermark `wm` made due."""

    def flush(self, out: list[Emit]) -> None:
        """Emit running results (checkpoint cut)."""

    def dump(self) -> Any:
        """The state as plain msgpack values."""
        return None

    def load(self, data: Any, what: str) -> None:
        """Take the state from `dump()`'s value (CorruptRecord if malformed)."""


Update = Callable[[Any, Any], Any]


def _update_all(updates: tuple[Update, ...]) -> Callable[[list[Any], Any], list[Any]]:
    """New accumulators of one event: one call per aggregation, unrolled for up to three (the
    running aggregates' per-event path; a generic comprehension costs a third more)."""
    if len(updates) == 1:
        (u0,) = updates
        return lambda accs, event: [u0(accs[0], event)]
    if len(updates) == 2:
        u0, u1 = updates
        return lambda accs, event: [u0(accs[0], event), u1(accs[1], event)]
    if len(updates) == 3:
        u0, u1, u2 = updates
        return lambda accs, event: [u0(accs[0], event), u1(accs[1], event), u2(accs[2], event)]
    return lambda accs, event: [u(a, event) for u, a in zip(updates, accs, strict=True)]


class _Aggregating(Terminal):
    def __init__(self, aggregations: tuple[Aggregation, ...], key_name: str) -> None:
        self._aggregations = aggregations
        self._key_name = key_name
        self._initial = [aggregation.init() for aggregation in aggregations]
        self._updates = [aggregation.update for aggregation in aggregations]
        self._update_all = _update_all(tuple(self._updates))
        self._values = [aggregation.value for aggregation in aggregations]
        self._adds = [aggregation.add for aggregation in aggregations]
        self._results = [(a.name, a.result) for a in aggregations]

    def _accumulate(self, accs: list[Any], items: Sequence[Any]) -> list[Any]:
        rows = [[value(item) for value in self._values] for item in items]
        for row in rows:
            accs = [add(acc, v) for add, acc, v in zip(self._adds, accs, row, strict=True)]
        return accs

    def _record(
        self, key: Key, accs: list[Any], bounds: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        record: dict[str, Any] = {self._key_name: key}
        if bounds is not None:
            record["window_start_ms"], record["window_end_ms"] = bounds
        for (name, result), acc in zip(self._results, accs, strict=True):
            record[name] = result(acc)
        return record

    def _accs(self, value: Any, what: str) -> list[Any]:
        if type(value) is not list or len(value) != len(self._aggregations):
            raise CorruptRecord(f"{what}: snapshot accumulators {value!r} do not fit the job")
        return value


class RunningAggregates(_Aggregating):
    """Per-key running aggregates; `flush` emits current totals of keys with new events."""

    def __init__(self, aggregations: tuple[Aggregation, ...], key_name: str) -> None:
        super().__init__(aggregations, key_name)
        self.accs: dict[Key, list[Any]] = {}
        self.changed: dict[Key, None] = {}

    def apply_one(
        self, key: Key, ts: int | None, event: Any, wm: int | None, out: list[Emit]
    ) -> None:
        """Add one event to its key's totals (atomic)."""
        accs = self.accs
        accs[key] = self._update_all(accs.get(key, self._initial), event)
        self.changed[key] = None

    def apply_many(
        self, key: Key, ts: int | None, items: Sequence[Any], wm: int | None, out: list[Emit]
    ) -> None:
        """Add a step's outputs to the key's totals (atomic)."""
        if items:
            self.accs[key] = self._accumulate(self.accs.get(key, self._initial), items)
            self.changed[key] = None

    def flush(self, out: list[Emit]) -> None:
        """One record per key that received events since the last flush: its current totals."""
        record, accs = self._record, self.accs
        out.extend([Emit(MAIN, record(key, accs[key])) for key in self.changed])
        self.changed.clear()

    def dump(self) -> Any:
        """[[key, accs], ...] and the changed keys."""
        return [list(self.accs.items()), list(self.changed)]

    def load(self, data: Any, what: str) -> None:
        """Take the dumped totals."""
        pairs, changed = _load(data, tuple[_Pairs, list[Any]], what)
        self.accs = {key_from_snapshot(k, what): self._accs(a, what) for k, a in pairs}
        self.changed = dict.fromkeys(key_from_snapshot(k, what) for k in changed)


class AlignedWindows(_Aggregating):
    """Tumbling and sliding windows aligned to epoch 0: {start: {key: accs}}."""

    def __init__(
        self,
        aggregations: tuple[Aggregation, ...],
        key_name: str,
        *,
        size_ms: int,
        slide_ms: int,
        allowed_lateness_ms: int,
    ) -> None:
        super().__init__(aggregations, key_name)
        self._size, self._slide, self._lateness = size_ms, slide_ms, allowed_lateness_ms
        self.open: dict[int, dict[Key, list[Any]]] = {}

    def apply_one(
        self, key: Key, ts: int | None, event: Any, wm: int | None, out: list[Emit]
    ) -> None:
        """Add one event (atomic); tumbling windows take a shorter path."""
        size = self._size
        if self._slide != size:
            return self.apply_many(key, ts, (event,), wm, out)
        assert ts is not None
        start = ts - ts % size
        if wm is not None and start + size + self._lateness <= wm:
            out.append(Emit(LATE, as_builtins(event)))
            self.late_events += 1
            return None
        by_key = self.open.get(start)
        accs = self._initial if by_key is None else by_key.get(key, self._initial)
        accs = self._update_all(accs, event)
        if by_key is None:
            by_key = self.open[start] = {}
            due = start + size + self._lateness
            if self.fire_at is None or due < self.fire_at:
                self.fire_at = due
        by_key[key] = accs
        return None

    def apply_many(
        self, key: Key, ts: int | None, items: Sequence[Any], wm: int | None, out: list[Emit]
    ) -> None:
        """Add the events to every window of `ts` not yet emitted; late if there is none."""
        assert ts is not None
        starts = window_starts(ts, self._size, self._slide)
        if wm is not None:
            horizon = wm - self._size - self._lateness  # emitted: start + size + lateness <= wm
            if horizon >= starts.start:
                skip = (horizon - starts.start) // self._slide + 1
                starts = range(starts.start + skip * self._slide, starts.stop, self._slide)
        if not starts:
            late = [Emit(LATE, as_builtins(item)) for item in items]
            out.extend(late)
            self.late_events += len(late)
            return
        rows = [[value(item) for value in self._values] for item in items]
        for start in starts:
            by_key = self.open.get(start)
            if by_key is None:
                by_key = self.open[start] = {}
                due = start + self._size + self._lateness
                if self.fire_at is None or due < self.fire_at:
                    self.fire_at = due
            accs = by_key.get(key, self._initial)
            for row in rows:
                accs = [add(acc, v) for add, acc, v in zip(self._adds, accs, row, strict=True)]
            by_key[key] = accs

    def fire(self, wm: int, out: list[Emit]) -> None:
        """Emit every window with end + lateness <= wm, ascending start, keys in arrival order."""
        size, lateness = self._size, self._lateness
        for start in sorted(s for s in self.open if s + size + lateness <= wm):
            end, record = start + size, self._record
            out.extend(
                [Emit(MAIN, record(k, a, (start, end))) for k, a in self.open.pop(start).items()]
            )
        self.fire_at = min(self.open) + size + lateness if self.open else None

    def dump(self) -> Any:
        """[[start, [[key, accs], ...]], ...]."""
        return [[start, list(by_key.items())] for start, by_key in self.open.items()]

    def load(self, data: Any, what: str) -> None:
        """Take the dumped windows."""
        windows = _load(data, list[tuple[int, _Pairs]], what)
        self.open = {
            start: {key_from_snapshot(k, what): self._accs(a, what) for k, a in pairs}
            for start, pairs in windows
        }
        if self.open:
            self.fire_at = min(self.open) + self._size + self._lateness


class SessionWindows(_Aggregating):
    """Per-key sessions [first, last + gap): {key: [[first, last, accs], ...] by first}."""

    def __init__(
        self,
        aggregations: tuple[Aggregation, ...],
        key_name: str,
        *,
        gap_ms: int,
        allowed_lateness_ms: int,
    ) -> None:
        super().__init__(aggregations, key_name)
        self._gap, self._lateness = gap_ms, allowed_lateness_ms
        self._merges = [aggregation.merge for aggregation in aggregations]
        self.sessions: dict[Key, list[list[Any]]] = {}
        # Each key with sessions has an entry (end, seq, key) in the heap with end <= its
        # least session end (`_least_end[key]`); stale entries are skipped or re-pushed.
        self._least_end: dict[Key, int] = {}
        self._heap: list[tuple[int, int, Key]] = []
        self._seq = 0

    def apply_many(
        self, key: Key, ts: int | None, items: Sequence[Any], wm: int | None, out: list[Emit]
    ) -> None:
        """Merge the events' span [ts, ts + gap) with the key's overlapping sessions."""
        assert ts is not None
        gap = self._gap
        if wm is not None and ts + gap + self._lateness <= wm:
            late = [Emit(LATE, as_builtins(item)) for item in items]
            out.extend(late)
            self.late_events += len(late)
            return
        accs = self._accumulate(self._initial, items)
        first, last, kept = ts, ts, []
        for session in self.sessions.get(key, ()):
            if session[0] < ts + gap and ts < session[1] + gap:
                first, last = min(first, session[0]), max(last, session[1])
                accs = [m(a, b) for m, a, b in zip(self._merges, accs, session[2], strict=True)]
            else:
                kept.append(session)
        kept.append([first, last, accs])
        kept.sort(key=lambda session: session[0])
        self.sessions[key] = kept
        self._track(key, kept)

    def _track(self, key: Key, sessions: list[list[Any]]) -> None:
        least = min(session[1] for session in sessions) + self._gap
        known = self._least_end.get(key)
        self._least_end[key] = least
        if known is None or least < known:
            self._push(least, key)

    def _push(self, end: int, key: Key) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (end, self._seq, key))
        self.fire_at = self._heap[0][0] + self._lateness

    def fire(self, wm: int, out: list[Emit]) -> None:
        """Emit every session with last + gap + lateness <= wm, by (end, key encoding)."""
        heap, gap, lateness = self._heap, self._gap, self._lateness
        due: list[tuple[int, bytes, int, Key, list[Any]]] = []
        while heap and heap[0][0] + lateness <= wm:
            end, _, key = heapq.heappop(heap)
            least = self._least_end.get(key)
            if least is None:
                continue
            if least != end:
                self._push(least, key)
                continue
            kept = []
            for first, last, accs in self.sessions[key]:
                if last + gap + lateness <= wm:
                    due.append((last + gap, key_order(key), first, key, accs))
                else:
                    kept.append([first, last, accs])
            del self._least_end[key]
            if kept:
                self.sessions[key] = kept
                self._track(key, kept)
            else:
                del self.sessions[key]
        self.fire_at = heap[0][0] + lateness if heap else None
        for end, _, first, key, accs in sorted(due, key=lambda d: d[:3]):
            out.append(Emit(MAIN, self._record(key, accs, (first, end))))

    def dump(self) -> Any:
        """[[key, [[first, last, accs], ...]], ...]."""
        return list(self.sessions.items())

    def load(self, data: Any, what: str) -> None:
        """Take the dumped sessions and rebuild the due-time heap."""
        for key, sessions in _load(data, list[tuple[Any, list[tuple[int, int, Any]]]], what):
            loaded = [[f, la, self._accs(a, what)] for f, la, a in sessions]
            if not loaded:
                raise CorruptRecord(f"{what}: snapshot holds a key with no sessions")
            key = key_from_snapshot(key, what)
            self.sessions[key] = loaded
            self._track(key, loaded)
