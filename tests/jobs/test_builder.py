"""Job builder validation: each mistake is refused at once with a one-line instruction."""

from __future__ import annotations

import msgspec
import pytest

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.jobs import (
    Count,
    Job,
    Mean,
    Session,
    SinkSpec,
    Sliding,
    Sum,
    Tumbling,
    compile_job,
)
from tests.jobs.support import ListSink, ListSource, base


def test_window_before_event_time_says_to_call_event_time_first() -> None:
    job = Job("clicks").source(ListSource()).key_by(lambda e: e["u"])
    with pytest.raises(InvalidArgument) as caught:
        job.window(Tumbling(size_ms=60_000), Count())
    assert str(caught.value) == (
        "job clicks: a window needs event time; call .event_time(...) before .window(...)"
    )


@pytest.mark.parametrize("name", ["", "Clicks", "a b", "x" * 65, "é"])
def test_bad_job_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="1-64 of a-z"):
        Job(name)


def test_an_operator_before_key_by_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"call \.key_by\(\.\.\.\) before \.step"):
        Job("j").step(lambda s, e: (s, ()))
    with pytest.raises(InvalidArgument, match=r"before \.aggregate"):
        Job("j").aggregate(Count())


def test_nothing_follows_a_terminal_operator() -> None:
    job = base().aggregate(Count())
    with pytest.raises(InvalidArgument, match=r"no \.step\(\.\.\.\) after it"):
        job.step(lambda s, e: (s, ()))
    with pytest.raises(InvalidArgument, match=r"no \.aggregate"):
        job.aggregate(Count())


def test_steps_chain_before_a_terminal_operator() -> None:
    job = base().step(lambda s, e: (s, [e])).step(lambda s, e: (s, [e])).aggregate(Count())
    assert len(job.operators) == 3


def test_declared_once_things_are_refused_twice() -> None:
    job = base()
    with pytest.raises(InvalidArgument, match=r"call \.key_by\(\.\.\.\) once"):
        job.key_by(lambda e: 1)
    with pytest.raises(InvalidArgument, match=r"call \.source\(\.\.\.\) once"):
        job.source(ListSource())
    timed = job.event_time(lambda e: 0)
    with pytest.raises(InvalidArgument, match=r"call \.event_time\(\.\.\.\) once"):
        timed.event_time(lambda e: 0)


def test_aggregation_names_must_be_distinct_and_not_the_key_or_bounds() -> None:
    job = base()
    with pytest.raises(InvalidArgument, match="'count' is taken"):
        job.aggregate(Count(), Count())
    with pytest.raises(InvalidArgument, match="'key' is taken"):
        job.aggregate(Sum(lambda e: 1, name="key"))
    with pytest.raises(InvalidArgument, match="'window_end_ms' is taken"):
        job.event_time(lambda e: 0).window(Tumbling(10), Count(name="window_end_ms"))
    with pytest.raises(InvalidArgument, match="at least one aggregation"):
        job.aggregate()


def test_window_and_aggregation_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="not a multiple of slide_ms 4"):
        Sliding(size_ms=10, slide_ms=4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match="positive int"):
            Tumbling(size_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="positive int"):
        Session(gap_ms=0)
    with pytest.raises(InvalidArgument, match="not callable"):
        Mean(3)  # type: ignore[arg-type]
    timed = base().event_time(lambda e: 0)
    with pytest.raises(InvalidArgument, match="allowed_lateness_ms -1"):
        timed.window(Tumbling(10), Count(), allowed_lateness_ms=-1)
    with pytest.raises(InvalidArgument, match="out_of_orderness_ms -5"):
        base().event_time(lambda e: 0, out_of_orderness_ms=-5)


def test_sinks_sources_events_and_policy_are_checked() -> None:
    job = Job("j")
    with pytest.raises(InvalidArgument, match="not a SinkSpec"):
        job.sink("stdout")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="sink stream 'side'"):
        job.sink(SinkSpec(stream="side"))
    with pytest.raises(InvalidArgument, match="not a SourceSpec"):
        job.source(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"not a msgspec\.Struct"):
        job.events(dict)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="'dead_letter' or 'stop'"):
        job.on_error("ignore")


def test_builder_methods_leave_the_original_job_unchanged() -> None:
    first = Job("j")
    second = first.source(ListSource())
    assert first.source_spec is None and second.source_spec == ListSource()
    with pytest.raises(AttributeError):
        first.name = "k"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("job", "lacks"),
    [
        (Job("j").key_by(lambda e: 1).aggregate(Count()).sink(ListSink()), "no source"),
        (Job("j").source(ListSource()).sink(ListSink()), "no key"),
        (Job("j").source(ListSource()).key_by(lambda e: 1).sink(ListSink()), "no operator"),
        (Job("j").source(ListSource()).key_by(lambda e: 1).aggregate(Count()), "no sink"),
    ],
)
def test_compile_names_what_the_job_lacks(job: Job, lacks: str) -> None:
    with pytest.raises(InvalidArgument, match=f"job j: {lacks}"):
        compile_job(job)


def test_a_sink_spec_subclass_describes_itself_and_keeps_its_stream() -> None:
    sink = ListSink("x", stream="late")
    assert (sink.stream, sink.label, sink.describe()) == ("late", "x", "ListSink(stream=late)")


class Click(msgspec.Struct):
    user: str
    ts_ms: int


def test_a_complete_job_compiles_with_a_struct_event_type() -> None:
    job = base().events(Click).aggregate(Count())
    program = compile_job(job)
    assert program.job is job
    assert program.decode_event(b'{"user": "a", "ts_ms": 1}') == Click("a", 1)


class _Repartitioned(ListSource):
    """A test source the cluster would repartition by key (as a FileSource is)."""

    repartitioned = True


def _words(line: dict[str, str]) -> list[dict[str, str]]:
    return [{"word": w} for w in line["text"].split()]


def test_flat_map_runs_before_the_key_and_only_once() -> None:
    job = Job("w").source(_Repartitioned()).flat_map(_words)
    with pytest.raises(InvalidArgument, match=r"has a flat_map already"):
        job.flat_map(_words)
    with pytest.raises(InvalidArgument, match=r"call \.flat_map\(\.\.\.\) before \.key_by"):
        Job("w").source(_Repartitioned()).key_by(lambda e: e["word"]).flat_map(_words)
    with pytest.raises(InvalidArgument, match="is not callable"):
        Job("w").flat_map("split")  # type: ignore[arg-type]


def test_flat_map_needs_a_source_repartitioned_by_key() -> None:
    def with_source(source: ListSource) -> Job:
        return (
            Job("w")
            .source(source)
            .flat_map(_words)
            .key_by(lambda e: e["word"])
            .aggregate(Count())
            .sink(ListSink("main"))
        )

    assert compile_job(with_source(_Repartitioned())).flat_map({"text": "a b"}) == [
        {"word": "a"},
        {"word": "b"},
    ]
    with pytest.raises(InvalidArgument, match=r"\.flat_map\(\.\.\.\) needs a source repartitioned"):
        compile_job(with_source(ListSource()))
