"""`compile_job` and `Program`: a checked job, ready to decode events and run vnodes.

`Program.decode_event` turns one raw JSON object into the job's event (a dict, or the
`.events(...)` Struct type) or raises `BadEvent`; `dead_letter_for` builds the dead-letter
record of such bytes. `new_vnode` / `restore_vnode` give the `VnodeRun` that holds one vnode's
state (`jobs.run`). The operator chain is turned into a `Plan` once, here, so nothing per event
re-inspects the job.
"""

from __future__ import annotations

from typing import Any

import msgspec

from laminar_cluster.assignment.vnode import Key
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.jobs.api import DEAD_LETTER, Emit, Job
from laminar_cluster.jobs.errors import BadEvent
from laminar_cluster.jobs.operators import AggregateOp, StepOp, WindowOp
from laminar_cluster.jobs.records import check_key
from laminar_cluster.jobs.run import Plan, VnodeRun, restore_run
from laminar_cluster.jobs.snapshot import state_decoder
from laminar_cluster.jobs.terminals import (
    AlignedWindows,
    RunningAggregates,
    SessionWindows,
    Terminal,
)
from laminar_cluster.jobs.windows import Session


def compile_job(job: Job) -> Program:
    """The runnable `Program` of `job`; InvalidArgument naming what the job still lacks."""
    return Program(job)


def _check_complete(job: Job) -> None:
    missing = [
        (job.source_spec is None, "no source; call .source(...)"),
        (job.key_fn is None, "no key; call .key_by(...)"),
        (not job.operators, "no operator; call .step(...), .aggregate(...) or .window(...)"),
        (not job.sinks, "no sink; call .sink(...)"),
    ]
    for absent, message in missing:
        if absent:
            raise InvalidArgument(f"job {job.name}: {message}")
    source = job.source_spec
    if job.flat_map_fn is not None and not (source is not None and source.repartitioned):
        raise InvalidArgument(
            f"job {job.name}: .flat_map(...) needs a source repartitioned by key (FileSource); "
            f"{source.describe() if source else 'this source'} is partitioned by the producer's "
            "key: flat_map before producing instead"
        )


def fingerprint(job: Job) -> str:
    """The job's name and operator shape: a snapshot restores only into the same fingerprint."""
    parts = [job.name, f"key:{job.key_name}", f"out-of-order:{job.out_of_orderness_ms}"]
    if job.flat_map_fn is not None:
        parts.insert(1, "flat_map")
    for op in job.operators:
        if isinstance(op, StepOp):
            parts.append("step")
            continue
        aggs = ",".join(f"{a.kind}:{a.name}" for a in op.aggregations)
        if isinstance(op, AggregateOp):
            parts.append(f"aggregate({aggs})")
        else:
            parts.append(f"window({op.window.describe()},{op.allowed_lateness_ms},{aggs})")
    return "|".join(parts)


def _terminal_factory(job: Job) -> Any:
    last = job.operators[-1]
    key_name = job.key_name
    if isinstance(last, AggregateOp):
        return lambda: RunningAggregates(last.aggregations, key_name)
    if isinstance(last, WindowOp):
        window, lateness = last.window, last.allowed_lateness_ms
        if isinstance(window, Session):
            return lambda: SessionWindows(
                last.aggregations, key_name, gap_ms=window.gap_ms, allowed_lateness_ms=lateness
            )
        size, slide = window.size_ms, window.slide_ms
        return lambda: AlignedWindows(
            last.aggregations, key_name, size_ms=size, slide_ms=slide, allowed_lateness_ms=lateness
        )
    return Terminal


class Program:
    """A compiled job (see the module docstring). Build it with `compile_job`."""

    def __init__(self, job: Job) -> None:
        _check_complete(job)
        assert job.key_fn is not None
        self.job = job
        self.fingerprint = fingerprint(job)
        steps = tuple(op for op in job.operators if isinstance(op, StepOp))
        self._plan = Plan(
            job_name=job.name,
            fingerprint=self.fingerprint,
            key_fn=job.key_fn,
            time_fn=job.event_time_fn,
            out_of_orderness_ms=job.out_of_orderness_ms,
            steps=steps,
            state_decoders=tuple(state_decoder(op.state_type) for op in steps),
            make_terminal=_terminal_factory(job),
            stop_on_error=job.error_policy == "stop",
        )
        event_type: Any = job.event_type if job.event_type is not None else dict[str, Any]
        self._decoder = msgspec.json.Decoder(event_type)
        self._event_kind = "a JSON object" if job.event_type is None else job.event_type.__name__

    def decode_event(self, raw: bytes) -> Any:
        """One event from the JSON object in `raw`; BadEvent with a one-line reason."""
        try:
            return self._decoder.decode(raw)
        except msgspec.ValidationError as error:
            reason = f"event is not {self._event_kind}: {error}"
        except msgspec.DecodeError as error:
            reason = f"event is not valid JSON: {error}"
        raise BadEvent(f"job {self.job.name}: {reason}")

    def dead_letter_for(
        self,
        raw: bytes,
        error: Exception,
        *,
        partition: int,
        offset: int,
        key: Any = None,
        where: str = "",
    ) -> Emit:
        """The dead-letter record of raw input that failed (its text kept): `key` when one was
        computed, `where` a prefix of the error naming the input (a file and record)."""
        what = f"{where}{type(error).__name__}: {error}"
        return Emit(
            DEAD_LETTER,
            {
                "job": self.job.name,
                "partition": partition,
                "offset": offset,
                "key": None if key is None else repr(key),
                "error": " ".join(what.splitlines()),
                "event": raw.decode("utf-8", errors="replace"),
            },
        )

    def flat_map(self, event: Any) -> list[Any]:
        """The events `event` becomes before the key (itself alone without a `.flat_map`);
        whatever the user's function raises propagates, and TypeError when it returns no
        iterable."""
        fn = self.job.flat_map_fn
        if fn is None:
            return [event]
        return list(fn(event))

    def key_of(self, event: Any) -> Key:
        """The key of a decoded event (for routing it to its vnode); TypeError if it is none."""
        return check_key(self._plan.key_fn(event))

    def new_vnode(self) -> VnodeRun:
        """The empty state of one vnode."""
        return VnodeRun(self._plan)

    def restore_vnode(self, data: bytes) -> VnodeRun:
        """The vnode state `VnodeRun.snapshot()` wrote; CorruptRecord if it is not this job's."""
        return restore_run(self._plan, data)
