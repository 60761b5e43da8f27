"""`JobProcessor`: a job's output is in flight at a cut, history at commit, pending again at
abort; unparseable events go to the dead letters with their offsets; idle windows close at a
cut; a restored state continues the job."""

from __future__ import annotations

import json

import pytest

from laminar_cluster.clock.simulated import SimulatedClock
from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.jobs import Count, Job, Sum, Tumbling
from laminar_cluster.jobs import compile_job as compile_
from laminar_cluster.runtime.engine_types import SourceBatch
from laminar_cluster.runtime.job_processor import JobProcessor, decode_output, encode_output
from tests.jobs.support import ListSink, ListSource


def _vnode(user: str) -> int:
    return key_hash(user) % 256


A = _vnode("a")  # the vnode of user "a": a batch's first event is checked to belong to it
B = next(f"b{i}" for i in range(10_000) if _vnode(f"b{i}") == A)  # another user of vnode A
Z = _vnode("zed")


def _counts() -> Job:
    return (
        Job("counts")
        .source(ListSource())
        .key_by(lambda e: e["user"], name="user")
        .aggregate(Count(), Sum(lambda e: e["n"], name="total"))
        .sink(ListSink("main"))
    )


def _windows() -> Job:
    return (
        Job("windows")
        .source(ListSource())
        .key_by(lambda e: e["user"], name="user")
        .event_time(lambda e: e["ts"], out_of_orderness_ms=0)
        .window(Tumbling(size_ms=1_000), Count())
        .sink(ListSink("main"))
    )


def _batch(first: int, *events: object) -> SourceBatch:
    raw = [e if isinstance(e, bytes) else json.dumps(e).encode() for e in events]
    return SourceBatch(first, first + len(raw), raw)


def _output(processor: JobProcessor, *vnodes: int) -> list[tuple[str, dict[str, object]]]:
    cut = processor.capture(vnodes)()
    return [(e.stream, e.record) for e in decode_output(cut.output, what="test")]


def test_output_is_in_flight_at_a_cut_and_history_after_commit() -> None:
    processor = JobProcessor(compile_(_counts()), SimulatedClock(), idle_close_s=None)
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"user": "a", "n": 2}, {"user": "a", "n": 5}))
    assert _output(processor, A) == [("main", {"user": "a", "count": 2, "total": 7})]
    processor.commit_output(A)
    processor.process(A, A, _batch(2, {"user": B, "n": 1}))
    assert _output(processor, A) == [("main", {"user": B, "count": 1, "total": 1})]


def test_an_aborted_cut_emits_its_output_again_before_what_came_after() -> None:
    processor = JobProcessor(compile_(_counts()), SimulatedClock(), idle_close_s=None)
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"user": "a", "n": 1}))
    first = _output(processor, A)
    processor.abort_output(A)
    processor.process(A, A, _batch(1, {"user": "a", "n": 1}))
    assert _output(processor, A) == [
        *first,
        ("main", {"user": "a", "count": 2, "total": 2}),
    ]


def test_an_unparseable_event_is_a_dead_letter_with_its_offset_and_the_rest_run() -> None:
    processor = JobProcessor(compile_(_counts()), SimulatedClock(), idle_close_s=None)
    processor.restore(A, None)
    processor.process(
        A, A + 256, _batch(10, {"user": "a", "n": 1}, b"{not json", {"user": "a", "n": 4})
    )
    output = _output(processor, A)
    dead = [record for stream, record in output if stream == "dead_letter"]
    assert [(d["partition"], d["offset"]) for d in dead] == [(A + 256, 11)]
    assert ("main", {"user": "a", "count": 2, "total": 5}) in output
    assert processor.figures()["bad_events"] == 1


class _Clock:
    """Monotonic time only (all the processor reads), moved by hand."""

    now_s = 0.0

    def monotonic(self) -> float:
        return self.now_s


def test_windows_of_an_idle_vnode_close_at_a_cut_after_idle_close_s() -> None:
    clock = _Clock()
    processor = JobProcessor(compile_(_windows()), clock, idle_close_s=5.0)  # type: ignore[arg-type]
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"user": "a", "ts": 100}, {"user": "a", "ts": 200}))
    assert _output(processor, A) == []  # the watermark has not passed the window
    processor.commit_output(A)
    clock.now_s = 4.9
    assert _output(processor, A) == []
    processor.commit_output(A)
    clock.now_s = 5.0
    assert _output(processor, A) == [
        ("main", {"user": "a", "window_start_ms": 0, "window_end_ms": 1_000, "count": 2})
    ]


def test_a_restored_cut_continues_the_job() -> None:
    program = compile_(_counts())
    processor = JobProcessor(program, SimulatedClock(), idle_close_s=None)
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"user": "a", "n": 3}))
    state = processor.capture((A,))().states[A]
    other = JobProcessor(program, SimulatedClock(), idle_close_s=None)
    other.restore(A, state)
    other.process(A, A, _batch(1, {"user": "a", "n": 4}))
    assert _output(other, A) == [("main", {"user": "a", "count": 2, "total": 7})]


def test_a_cut_of_another_job_is_refused() -> None:
    state = JobProcessor(compile_(_counts()), SimulatedClock(), idle_close_s=None)
    state.restore(A, None)
    data = state.capture((A,))().states[A]
    windows = JobProcessor(compile_(_windows()), SimulatedClock(), idle_close_s=None)
    with pytest.raises(CorruptRecord):
        windows.restore(A, data)


def test_output_bytes_round_trip_and_garbage_is_corrupt() -> None:
    from laminar_cluster.jobs import Emit

    emits = [Emit("main", {"a": 1}), Emit("late", {"b": "x"})]
    assert decode_output(encode_output(emits), what="t") == emits
    with pytest.raises(CorruptRecord):
        decode_output(b"\x01\x02", what="t")
    with pytest.raises(InvalidArgument):
        encode_output([Emit("main", {"a": object()})])


def _raises_on(bad: str) -> Job:
    def step(state: int, event: dict[str, object]) -> tuple[int, list[dict[str, object]]]:
        if event["user"] == bad:
            raise ValueError("bad user")
        return state + 1, [{"user": event["user"], "seen": state + 1}]

    return (
        Job("steps")
        .source(ListSource())
        .key_by(lambda e: e["user"], name="user")
        .step(step, initial=lambda: 0, state_type=int)
        .sink(ListSink("main"))
    )


def test_a_raising_step_is_a_dead_letter_naming_key_and_offset_by_default() -> None:
    processor = JobProcessor(compile_(_raises_on("x")), SimulatedClock(), idle_close_s=None)
    processor.restore(A, None)
    processor.process(A, A, _batch(4, {"user": "a"}, {"user": "x"}, {"user": "a"}))
    output = _output(processor, A)
    dead = [r for s, r in output if s == "dead_letter"]
    assert len(dead) == 1 and dead[0]["offset"] == 5 and "x" in str(dead[0]["key"])
    assert [r["seen"] for s, r in output if s == "main"] == [1, 2]


def test_a_raising_step_under_stop_stops_the_job_and_refuses_every_cut() -> None:
    from laminar_cluster.errors import Refused
    from laminar_cluster.jobs import StepFailed

    stopped: list[Exception] = []
    processor = JobProcessor(
        compile_(_raises_on("x").on_error("stop")),
        SimulatedClock(),
        idle_close_s=None,
        on_fatal=stopped.append,
    )
    processor.restore(A, None)
    with pytest.raises(StepFailed) as raised:
        processor.process(A, A, _batch(4, {"user": "a"}, {"user": "x"}))
    assert (raised.value.partition, raised.value.offset) == (A, 5)
    assert stopped == [raised.value]
    with pytest.raises(Refused):
        processor.capture((A,))  # what was applied before the failure is never checkpointed
    with pytest.raises(Refused):
        processor.process(A, A, _batch(6, {"user": "a"}))


def test_state_that_cannot_be_encoded_stops_the_job_naming_the_key() -> None:
    from laminar_cluster.jobs import StateNotEncodable

    job = (
        Job("objects")
        .source(ListSource())
        .key_by(lambda e: e["user"], name="user")
        .step(lambda state, event: (object(), []), initial=lambda: 0)
        .sink(ListSink("main"))
    )
    stopped: list[Exception] = []
    processor = JobProcessor(
        compile_(job), SimulatedClock(), idle_close_s=None, on_fatal=stopped.append
    )
    processor.restore(Z, None)
    processor.process(Z, Z, _batch(0, {"user": "zed"}))
    with pytest.raises(StateNotEncodable, match="zed"):
        processor.capture((Z,))
    assert len(stopped) == 1


def test_dc21_a_job_with_windows_due_to_close_is_not_quiescent() -> None:
    clock = _Clock()
    processor = JobProcessor(compile_(_windows()), clock, idle_close_s=5.0)  # type: ignore[arg-type]
    processor.restore(A, None)
    assert processor.quiescent()  # restored empty: nothing to close
    processor.process(A, A, _batch(0, {"user": "a", "ts": 100}))
    clock.now_s = 4.0
    assert processor.quiescent()  # not idle long enough
    clock.now_s = 5.0
    assert not processor.quiescent()  # the next cut closes the window: a quiet skip would not
    processor.capture((A,))
    processor.commit_output(A)
    assert processor.quiescent()


def test_an_event_produced_under_another_key_stops_the_job() -> None:
    from laminar_cluster.runtime.job_processor import KeyMismatch

    stopped: list[Exception] = []
    processor = JobProcessor(
        compile_(_counts()), SimulatedClock(), idle_close_s=None, on_fatal=stopped.append
    )
    other = (A + 1) % 256
    processor.restore(other, None)
    with pytest.raises(KeyMismatch, match=f"whose partition is {A} modulo 256, not {other}"):
        processor.process(other, other, _batch(0, {"user": "a", "n": 1}))
    assert len(stopped) == 1
    with pytest.raises(Exception, match="stopped"):
        processor.capture((other,))


def test_a_node_of_16_vnodes_runs_the_events_of_its_vnodes_partitions() -> None:
    """With `--vnodes 16`, vnode v reads every record partition p with p % 16 == v: a key of
    partition p is in place there (the demo on S3 runs 16 vnodes)."""
    user = next(f"u{i}" for i in range(10_000) if _vnode(f"u{i}") >= 16)
    partition = _vnode(user)
    processor = JobProcessor(compile_(_counts()), SimulatedClock(), idle_close_s=None)
    processor.restore(partition % 16, None)
    processor.process(partition % 16, partition, _batch(0, {"user": user, "n": 5}))
    assert _output(processor, partition % 16) == [("main", {"user": user, "count": 1, "total": 5})]


def test_windows_of_a_vnode_that_has_not_read_all_its_input_stay_open() -> None:
    """A vnode paused by a drain (or failing to read) is not idle, however long it waits: its
    waiting events must not become late because its windows closed meanwhile."""
    clock = _Clock()
    processor = JobProcessor(compile_(_windows()), clock, idle_close_s=5.0)  # type: ignore[arg-type]
    reading = {"done": False}
    processor.caught_up = lambda vnode: reading["done"]
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"user": "a", "ts": 100}))
    clock.now_s = 60.0
    assert processor.quiescent()
    assert _output(processor, A) == []
    processor.commit_output(A)
    reading["done"] = True
    assert not processor.quiescent()
    assert [r["count"] for _, r in _output(processor, A)] == [1]


def test_idle_windows_close_even_when_a_batch_begins_with_an_event_whose_key_raised() -> None:
    clock = _Clock()
    processor = JobProcessor(compile_(_windows()), clock, idle_close_s=5.0)  # type: ignore[arg-type]
    processor.restore(A, None)
    processor.process(A, A, _batch(0, {"ts": 50}, {"user": "a", "ts": 100}))  # no key, then "a"
    clock.now_s = 5.0
    output = _output(processor, A)
    assert [s for s, _ in output] == ["dead_letter", "main"]
    assert output[1][1]["count"] == 1
