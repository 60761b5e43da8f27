"""Snapshots: restoring at any split point continues exactly; foreign bytes are refused."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.jobs import (
    Count,
    Emit,
    Job,
    Max,
    Mean,
    Session,
    Sliding,
    StateNotEncodable,
    Sum,
    Tumbling,
    compile_job,
)
from tests.jobs.support import base, timed


class Tally(msgspec.Struct):
    n: int
    seen: list[str]


def tally(state: Tally, event: dict[str, Any]) -> tuple[Tally, list[dict[str, Any]]]:
    seen = [*state.seen, str(event["v"])][-3:]
    return Tally(state.n + 1, seen), [{"k": event["k"], "n": state.n + 1, "last": seen}]


def double(state: int, event: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    if event["v"] == 13:
        raise ValueError("unlucky")
    return state + 1, [event, {**event, "v": event["v"] * 2}]


AGGS = (Count(), Sum(lambda e: e["v"]), Max(lambda e: e["v"]), Mean(lambda e: e["v"]))
JOBS = {
    "struct_step": base().step(tally, initial=lambda: Tally(0, []), state_type=Tally),
    "running": base().aggregate(*AGGS),
    "step_then_running": base().step(double, initial=lambda: 0, state_type=int).aggregate(*AGGS),
    "tumbling": timed(5).window(Tumbling(10), *AGGS, allowed_lateness_ms=5),
    "sliding": timed(5).step(double, initial=lambda: 0).window(Sliding(20, 5), *AGGS),
    "session": timed(5).window(Session(7), *AGGS, allowed_lateness_ms=3),
}

events_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.sampled_from(["a", "b", 5, b"\x00"]),
            "ts": st.integers(0, 200),
            "v": st.integers(-3, 14),
        }
    ),
    max_size=30,
)


def drive(
    job: Job, events: list[dict[str, Any]], split: int, *, restore: bool
) -> tuple[list[Emit], bytes]:
    """Process events[:split], flush (a checkpoint cut), maybe snapshot and restore, process
    the rest in batches of 4, flush, close; the emits and the final snapshot."""
    program = compile_job(job)
    run = program.new_vnode()
    out: list[Emit] = []
    run.process(events[:split], partition=3, first_offset=0, out=out)
    run.flush(out)
    if restore:
        run = program.restore_vnode(run.snapshot())
    for start in range(split, len(events), 4):
        run.process(events[start : start + 4], partition=3, first_offset=start, out=out)
    run.flush(out)
    run.close_windows(out)
    counters = (run.events, run.late_events, run.dead_letters, run.watermark_ms)
    out.append(Emit("counters", {"values": list(counters)}))
    return out, run.snapshot()


@pytest.mark.parametrize("name", sorted(JOBS))
@settings(max_examples=40, deadline=None)
@given(events=events_strategy, data=st.data())
def test_restoring_a_snapshot_at_any_split_point_continues_identically(
    name: str, events: list[dict[str, Any]], data: st.DataObject
) -> None:
    split = data.draw(st.integers(0, len(events)))
    assert drive(JOBS[name], events, split, restore=True) == drive(
        JOBS[name], events, split, restore=False
    )


def test_every_split_point_of_one_disordered_input_continues_identically() -> None:
    events = [{"k": "ab"[i % 2], "ts": (i * 37) % 101, "v": i % 15} for i in range(60)]
    for name, job in JOBS.items():
        for split in range(len(events) + 1):
            restored = drive(job, events, split, restore=True)
            assert restored == drive(job, events, split, restore=False), (name, split)


def test_a_snapshot_of_another_job_or_operator_shape_is_corrupt() -> None:
    run = compile_job(JOBS["tumbling"]).new_vnode()
    run.process([{"k": "a", "ts": 1, "v": 1}], partition=0, first_offset=0, out=[])
    data = run.snapshot()
    renamed = timed(5, name="other").window(Tumbling(10), *AGGS, allowed_lateness_ms=5)
    resized = timed(5).window(Tumbling(20), *AGGS, allowed_lateness_ms=5)
    for job in (renamed, resized, JOBS["session"], JOBS["running"]):
        with pytest.raises(
            CorruptRecord,
            match=re.escape("vnode snapshot: it is of job 't|key:key|out-of-order:5|window("),
        ):
            compile_job(job).restore_vnode(data)


@pytest.mark.parametrize(
    "data", [b"", b"garbage", msgspec.msgpack.encode([2, "t", None, 0, 0, 0, [], None])]
)
def test_bytes_that_are_no_snapshot_are_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecord, match="bytes are not a vnode snapshot"):
        compile_job(JOBS["running"]).restore_vnode(data)


def test_step_states_that_do_not_decode_as_the_state_type_are_corrupt() -> None:
    loose = base().step(lambda s, e: ({"n": 1}, ()), state_type=Any)
    run = compile_job(loose).new_vnode()
    run.process([{"k": "a"}], partition=0, first_offset=0, out=[])
    strict = base().step(lambda s, e: (1, ()), state_type=int)
    with pytest.raises(CorruptRecord, match="do not decode as the state type"):
        compile_job(strict).restore_vnode(run.snapshot())


def test_state_msgspec_cannot_encode_names_the_key_and_the_type() -> None:
    class Opaque:
        pass

    job = base().step(lambda s, e: (Opaque() if e["k"] == "bad" else 1, ()))
    run = compile_job(job).new_vnode()
    run.process([{"k": "ok"}, {"k": "bad"}], partition=0, first_offset=0, out=[])
    with pytest.raises(StateNotEncodable) as caught:
        run.snapshot()
    assert isinstance(caught.value, InvalidArgument)
    assert "key 'bad'" in str(caught.value) and "is a Opaque" in str(caught.value)


def test_tuple_and_bytes_keys_survive_a_snapshot() -> None:
    job = (
        Job("tk")
        .source(base().source_spec)  # type: ignore[arg-type]
        .key_by(lambda e: (e["a"], e["b"]))
        .aggregate(Count())
        .sink(base().sinks[0])
    )
    program = compile_job(job)
    run = program.new_vnode()
    run.process([{"a": "x", "b": b"\x01"}, {"a": "x", "b": 2}], partition=0, first_offset=0, out=[])
    out: list[Emit] = []
    program.restore_vnode(run.snapshot()).flush(out)
    assert [e.record for e in out] == [
        {"key": ("x", b"\x01"), "count": 1},
        {"key": ("x", 2), "count": 1},
    ]
