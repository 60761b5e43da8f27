"""Helpers for the jobs tests: a source and sink declaration, and running a job over events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from laminar_cluster.jobs import Emit, Job, SinkSpec, SourceSpec, VnodeRun, compile_job


@dataclass(frozen=True, kw_only=True)
class ListSource(SourceSpec):
    """A source declaration for tests (nothing reads it)."""

    label: str = "test"


@dataclass(frozen=True)
class ListSink(SinkSpec):
    """A sink declaration for tests, with a positional field after the base's `stream`."""

    label: str = "test"


def base(name: str = "t", key: str = "k") -> Job:
    """A job with a source, a key `e["k"]` (column `key`), a main sink and a late sink."""
    return (
        Job(name)
        .source(ListSource())
        .key_by(lambda e: e[key])
        .sink(ListSink("main"))
        .sink(ListSink("late", stream="late"))
    )


def timed(ooo_ms: int, name: str = "t") -> Job:
    """`base` with event time e["ts"] and out-of-orderness `ooo_ms`."""
    return base(name).event_time(lambda e: e["ts"], out_of_orderness_ms=ooo_ms)


def run_all(
    job: Job, events: Sequence[Any], *, batch: int = 3, close: bool = True
) -> tuple[list[Emit], VnodeRun]:
    """Process `events` in batches of `batch` (partition 0, offsets from 0), flush, close."""
    run = compile_job(job).new_vnode()
    out: list[Emit] = []
    for start in range(0, len(events), batch):
        run.process(events[start : start + batch], partition=0, first_offset=start, out=out)
    run.flush(out)
    if close:
        run.close_windows(out)
    return out, run


def stream(out: Sequence[Emit], name: str) -> list[dict[str, Any]]:
    """The records of one stream, in order."""
    return [emit.record for emit in out if emit.stream == name]
