"""Event-time windows against brute-force references that know only the documented rules:
the watermark is (max ts seen) - out_of_orderness; a window [s, e) is emitted once, when the
watermark reaches e + allowed_lateness; an event with no window still open is late."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.jobs import (
    LATE,
    MAIN,
    WATERMARK_CLOSED_MS,
    Count,
    Emit,
    Job,
    Max,
    Mean,
    Min,
    Session,
    Sliding,
    Sum,
    Tumbling,
    compile_job,
)
from tests.jobs.support import run_all, stream, timed

KEYS = ["a", "b", 7, b"z"]
AGGS = (Count(), Sum(lambda e: e["v"]), Min(lambda e: e["v"]), Max(lambda e: e["v"]))
AGG_COLUMNS = ("count", "sum", "min", "max")
Row = tuple[Any, int, int, int, int, int, int]  # key, start, end, count, sum, min, max

event_lists = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(-50, 300), st.integers(-5, 9)), max_size=40
)


def arrival(raw: list[tuple[Any, int, int]], delays: list[int]) -> list[dict[str, Any]]:
    """Events in arrival order: sorted by ts + delay (a delay <= D means disorder <= D)."""
    order = sorted(range(len(raw)), key=lambda i: (raw[i][1] + delays[i % len(delays)], i))
    return [{"k": raw[i][0], "ts": raw[i][1], "v": raw[i][2]} for i in order]


def summary(key: Any, start: int, end: int, values: list[int]) -> Row:
    return (key, start, end, len(values), sum(values), min(values), max(values))


def rows(records: list[dict[str, Any]]) -> list[Row]:
    return sorted(
        (
            tuple(r[c] for c in ("key", "window_start_ms", "window_end_ms", *AGG_COLUMNS))
            for r in records
        ),
        key=repr,
    )


def reference_aligned(
    events: list[dict[str, Any]], size: int, slide: int, ooo: int, lateness: int
) -> tuple[list[Row], list[dict[str, Any]]]:
    wm: int | None = None
    late, windows = [], defaultdict(list)
    for e in events:
        ts = e["ts"]
        containing = [s for s in range(ts - size + 1, ts + 1) if s % slide == 0]
        still_open = [s for s in containing if wm is None or s + size + lateness > wm]
        if not still_open:
            late.append(e)
        for s in still_open:
            windows[(e["k"], s)].append(e["v"])
        wm = ts - ooo if wm is None else max(wm, ts - ooo)
    return sorted((summary(k, s, s + size, v) for (k, s), v in windows.items()), key=repr), late


def reference_sessions(
    events: list[dict[str, Any]], gap: int, ooo: int, lateness: int
) -> tuple[list[Row], list[dict[str, Any]]]:
    """Simulates arrival: sessions as lists of (ts, v); emitted ones are gone."""
    wm: int | None = None
    late: list[dict[str, Any]] = []
    done: list[Row] = []
    live: dict[Any, list[list[tuple[int, int]]]] = defaultdict(list)

    def emit_due(limit: float) -> None:
        for key, sessions in live.items():
            for s in [s for s in sessions if max(t for t, _ in s) + gap + lateness <= limit]:
                sessions.remove(s)
                stamps = [t for t, _ in s]
                done.append(summary(key, min(stamps), max(stamps) + gap, [v for _, v in s]))

    for e in events:
        ts = e["ts"]
        if wm is not None and ts + gap + lateness <= wm:
            late.append(e)
        else:
            group, rest = [(ts, e["v"])], []
            for s in live[e["k"]]:
                stamps = [t for t, _ in s]
                overlaps = min(stamps) < ts + gap and ts < max(stamps) + gap
                (group if overlaps else rest).extend([s] if not overlaps else s)
            live[e["k"]] = [*rest, group]
        wm = ts - ooo if wm is None else max(wm, ts - ooo)
        emit_due(wm)
    emit_due(float("inf"))
    return sorted(done, key=repr), late


def window_job(window: Any, ooo: int, lateness: int) -> Job:
    return timed(ooo).window(window, *AGGS, allowed_lateness_ms=lateness)


@settings(max_examples=150, deadline=None)
@given(
    raw=event_lists,
    delays=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    shape=st.sampled_from([(10, 10), (20, 5), (30, 10), (7, 7), (12, 4)]),
    ooo=st.integers(0, 30),
    lateness=st.integers(0, 25),
)
def test_aligned_windows_equal_the_reference(
    raw: list[tuple[Any, int, int]],
    delays: list[int],
    shape: tuple[int, int],
    ooo: int,
    lateness: int,
) -> None:
    size, slide = shape
    events = arrival(raw, delays)
    window = Tumbling(size) if size == slide else Sliding(size, slide)
    out, run = run_all(window_job(window, ooo, lateness), events)
    expected, late = reference_aligned(events, size, slide, ooo, lateness)
    assert rows(stream(out, MAIN)) == expected
    assert stream(out, LATE) == late
    assert run.late_events == len(late)
    if max(delays) <= ooo:
        assert late == []  # disorder within out_of_orderness is never late


@settings(max_examples=150, deadline=None)
@given(
    raw=event_lists,
    delays=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    gap=st.integers(1, 30),
    ooo=st.integers(0, 30),
    lateness=st.integers(0, 25),
)
def test_session_windows_equal_the_reference(
    raw: list[tuple[Any, int, int]], delays: list[int], gap: int, ooo: int, lateness: int
) -> None:
    events = arrival(raw, delays)
    out, run = run_all(window_job(Session(gap), ooo, lateness), events)
    expected, late = reference_sessions(events, gap, ooo, lateness)
    assert rows(stream(out, MAIN)) == expected
    assert stream(out, LATE) == late
    assert run.late_events == len(late)


@settings(max_examples=100, deadline=None)
@given(raw=event_lists, gap=st.integers(1, 30), ooo=st.integers(0, 30))
def test_sessions_with_disorder_within_the_bound_split_the_sorted_events_by_gap(
    raw: list[tuple[Any, int, int]], gap: int, ooo: int
) -> None:
    events = arrival(raw, [ooo])
    out, _ = run_all(window_job(Session(gap), ooo, 0), events)
    expected = []
    for key in KEYS:
        mine = sorted((e["ts"], e["v"]) for e in events if e["k"] == key)
        groups: list[list[tuple[int, int]]] = []
        for t, v in mine:
            if groups and t < groups[-1][-1][0] + gap:
                groups[-1].append((t, v))
            else:
                groups.append([(t, v)])
        for g in groups:
            expected.append(summary(key, g[0][0], g[-1][0] + gap, [v for _, v in g]))
    assert rows(stream(out, MAIN)) == sorted(expected, key=repr)
    assert stream(out, LATE) == []


@settings(max_examples=100, deadline=None)
@given(
    raw=event_lists,
    delays=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    window=st.sampled_from([Tumbling(10), Sliding(20, 5), Session(8)]),
    ooo=st.integers(0, 20),
    lateness=st.integers(0, 20),
)
def test_a_window_is_emitted_as_soon_as_the_watermark_passes_its_end_plus_lateness(
    raw: list[tuple[Any, int, int]], delays: list[int], window: Any, ooo: int, lateness: int
) -> None:
    events = arrival(raw, delays)
    run = compile_job(window_job(window, ooo, lateness)).new_vnode()
    out: list[Emit] = []
    for offset, event in enumerate(events):
        run.process([event], partition=0, first_offset=offset, out=out)
        wm = run.watermark_ms
        assert wm is not None
        assert all(r["window_end_ms"] + lateness <= wm for r in stream(out, MAIN))
    closed = len(stream(out, MAIN))
    run.close_windows(out)
    assert run.watermark_ms == WATERMARK_CLOSED_MS
    pending = stream(out, MAIN)[closed:]
    assert all(r["window_end_ms"] + lateness > (wm if events else 0) for r in pending)


def test_late_events_go_to_the_late_stream_and_allowed_lateness_keeps_a_window_open() -> None:
    events = [{"k": "a", "ts": t, "v": 1} for t in (5, 25, 3, 12, 40, 14)]
    # Watermark (no out-of-orderness) after 25 is 25: [0, 10) + lateness 10 is due at 20.
    out, run = run_all(timed(0).window(Tumbling(10), Count(), allowed_lateness_ms=10), events)
    # 3 arrives at watermark 25, after [0, 10) was emitted (due at 0 + 10 + 10 = 20): late.
    # 12 arrives at 25: [10, 20) is due at 30, still open. 14 arrives at 40: late.
    assert [r["ts"] for r in stream(out, LATE)] == [3, 14]
    assert run.late_events == 2
    counts = {r["window_start_ms"]: r["count"] for r in stream(out, MAIN)}
    assert counts == {0: 1, 10: 1, 20: 1, 40: 1}


def test_window_records_have_key_bounds_then_aggregates_in_declaration_order() -> None:
    job = (
        Job("w")
        .source(timed(0).source_spec)  # type: ignore[arg-type]
        .key_by(lambda e: e["u"], name="user")
        .event_time(lambda e: e["ts"])
        .window(Tumbling(10), Mean(lambda e: e["v"], name="avg"), Count())
        .sink(timed(0).sinks[0])
    )
    out, _ = run_all(job, [{"u": "x", "ts": 1, "v": 2}, {"u": "x", "ts": 3, "v": 3}])
    assert [list(e.record.items()) for e in out] == [
        [("user", "x"), ("window_start_ms", 0), ("window_end_ms", 10), ("avg", 2.5), ("count", 2)]
    ]


def test_a_session_event_is_late_exactly_when_ts_plus_gap_plus_lateness_reaches_watermark() -> None:
    events = [{"k": "a", "ts": t, "v": 1} for t in (100, 93, 94)]
    out, run = run_all(timed(0).window(Session(5), Count(), allowed_lateness_ms=2), events)
    assert [r["ts"] for r in stream(out, LATE)] == [93]  # 93 + 5 + 2 <= 100; 94 is not
    assert [(r["window_start_ms"], r["window_end_ms"]) for r in stream(out, MAIN)] == [
        (94, 99),
        (100, 105),
    ]
    assert run.late_events == 1
