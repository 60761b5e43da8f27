"""Running aggregates, keyed steps, step errors and event decoding."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from laminar_cluster.errors import LaminarError
from laminar_cluster.jobs import (
    DEAD_LETTER,
    MAIN,
    BadEvent,
    Count,
    Emit,
    Mean,
    StepFailed,
    Sum,
    Tumbling,
    compile_job,
)
from tests.jobs.support import base, run_all, stream, timed


def test_running_aggregates_emit_current_totals_of_changed_keys_at_each_flush() -> None:
    run = compile_job(base().aggregate(Count(), Sum(lambda e: e["v"], name="total"))).new_vnode()
    out: list[Emit] = []
    run.process(
        [{"k": "a", "v": 2}, {"k": "b", "v": 5}, {"k": "a", "v": 1}],
        partition=0,
        first_offset=0,
        out=out,
    )
    assert out == []  # nothing before a flush
    run.flush(out)
    assert stream(out, MAIN) == [
        {"key": "a", "count": 2, "total": 3},
        {"key": "b", "count": 1, "total": 5},
    ]
    out.clear()
    run.flush(out)
    assert out == []  # no key changed since the last flush
    run.process([{"k": "b", "v": 1}], partition=0, first_offset=3, out=out)
    run.close_windows(out)
    run.flush(out)
    assert stream(out, MAIN) == [{"key": "b", "count": 2, "total": 6}]


def test_a_keyed_step_keeps_state_per_key_and_its_outputs_are_main_records() -> None:
    class Seen(msgspec.Struct):
        user: Any
        nth: int

    def number(state: int, event: dict[str, Any]) -> tuple[int, list[Seen]]:
        return state + 1, [Seen(event["k"], state + 1)]

    events = [{"k": k} for k in ["a", "b", "a", 3, "a", 3]]
    out, run = run_all(base().step(number, initial=lambda: 0, state_type=int), events)
    assert stream(out, MAIN) == [
        {"user": k, "nth": n} for k, n in [("a", 1), ("b", 1), ("a", 2), (3, 1), ("a", 3), (3, 2)]
    ]
    assert run.events == 6


def test_step_outputs_feed_the_next_operator_with_the_same_key_and_event_time() -> None:
    def words(state: None, event: dict[str, Any]) -> tuple[None, list[dict[str, Any]]]:
        return None, [{"w": w} for w in event["text"].split()]

    job = timed(0).step(words).window(Tumbling(10), Count())
    events = [{"k": "doc", "ts": 1, "text": "a b c"}, {"k": "doc", "ts": 12, "text": "d"}]
    out, _ = run_all(job, events)
    assert [(r["window_start_ms"], r["count"]) for r in stream(out, MAIN)] == [(0, 3), (10, 1)]


def test_a_raising_step_sends_the_event_to_dead_letter_and_leaves_the_state() -> None:
    def total(state: int, event: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
        if event.get("bad"):
            raise ValueError("bad event\nsecond line")
        return state + event["v"], [{"k": event["k"], "total": state + event["v"]}]

    events = [{"k": "a", "v": 1}, {"k": "a", "v": 10, "bad": True}, {"k": "a", "v": 2}]
    run = compile_job(base().step(total, initial=lambda: 0)).new_vnode()
    out: list[Emit] = []
    run.process(events, partition=4, first_offset=100, out=out)
    assert stream(out, DEAD_LETTER) == [
        {
            "job": "t",
            "partition": 4,
            "offset": 101,
            "key": "'a'",
            "error": "ValueError: bad event second line",
            "event": '{"k":"a","v":10,"bad":true}',
        }
    ]
    assert [r["total"] for r in stream(out, MAIN)] == [1, 3]
    assert run.dead_letters == 1


def test_a_raising_key_time_or_aggregation_function_is_a_dead_letter() -> None:
    job = timed(0).window(Tumbling(10), Sum(lambda e: e["v"]))
    events: list[Any] = [
        {"ts": 1, "v": 1},  # no key
        {"k": "a", "ts": "soon", "v": 1},  # time not an int
        {"k": "a", "ts": 2, "v": "x"},  # not a number
        {"k": True, "ts": 2, "v": 1},  # bool is no key
        {"k": "a", "ts": 3, "v": 4},
    ]
    out, run = run_all(job, events)
    letters = stream(out, DEAD_LETTER)
    assert [(d["offset"], d["key"], d["error"].split(":")[0]) for d in letters] == [
        (0, None, "KeyError"),
        (1, "'a'", "TypeError"),
        (2, "'a'", "TypeError"),
        (3, "True", "TypeError"),
    ]
    assert stream(out, MAIN) == [{"key": "a", "window_start_ms": 0, "window_end_ms": 10, "sum": 4}]
    assert run.dead_letters == 4


def test_a_failed_chain_changes_no_state_of_any_step() -> None:
    def count(state: int, event: Any) -> tuple[int, list[Any]]:
        return state + 1, [event]

    def picky(state: int, event: Any) -> tuple[int, list[dict[str, int]]]:
        if event["v"] < 0:
            raise ValueError("negative")
        return state + 1, [{"n": state + 1}]

    job = base().step(count, initial=lambda: 0).step(picky, initial=lambda: 0)
    out, _ = run_all(job, [{"k": "a", "v": 1}, {"k": "a", "v": -1}, {"k": "a", "v": 1}])
    assert stream(out, MAIN) == [{"n": 1}, {"n": 2}]
    assert len(stream(out, DEAD_LETTER)) == 1


def test_the_stop_policy_raises_step_failed_naming_job_key_partition_and_offset() -> None:
    def fail(state: None, event: Any) -> tuple[None, list[Any]]:
        raise RuntimeError("no")

    run = compile_job(base().step(fail).on_error("stop")).new_vnode()
    with pytest.raises(StepFailed) as caught:
        run.process([{"k": 9}], partition=2, first_offset=77, out=[])
    error = caught.value
    assert isinstance(error, LaminarError)
    assert (error.job, error.key, error.partition, error.offset) == ("t", 9, 2, 77)
    assert str(error) == "job t: partition 2 offset 77 key 9: RuntimeError: no"
    assert isinstance(error.__cause__, RuntimeError)


def test_a_step_output_that_is_not_a_record_is_a_dead_letter() -> None:
    out, _ = run_all(base().step(lambda s, e: (s, [42])), [{"k": "a"}])
    assert stream(out, DEAD_LETTER)[0]["error"].startswith("TypeError: step output 42 is a int")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "event is not valid JSON"),
        (b"[1, 2]", "event is not a JSON object"),
        (b"", "event is not valid JSON"),
    ],
)
def test_undecodable_events_raise_bad_event_with_a_one_line_reason(raw: bytes, reason: str) -> None:
    program = compile_job(base().aggregate(Count()))
    with pytest.raises(BadEvent, match=reason) as caught:
        program.decode_event(raw)
    assert "\n" not in str(caught.value)
    assert program.decode_event(b'{"k": "a", "v": 1.5}') == {"k": "a", "v": 1.5}


def test_dead_letter_for_keeps_the_raw_text() -> None:
    program = compile_job(base().aggregate(Mean(lambda e: e["v"])))
    raw = b'{"k": \xff'
    try:
        program.decode_event(raw)
    except BadEvent as error:
        emit = program.dead_letter_for(raw, error, partition=1, offset=9)
    assert emit.stream == DEAD_LETTER
    assert emit.record["event"] == '{"k": \ufffd'
    assert emit.record["error"].startswith("BadEvent: job t: event is not valid JSON")
    assert (emit.record["partition"], emit.record["offset"], emit.record["key"]) == (1, 9, None)
