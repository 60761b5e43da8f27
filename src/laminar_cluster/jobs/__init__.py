"""The public job API: declare a job (`Job`), compile it (`compile_job`), run vnodes.

Pure: no I/O and no asyncio. Users write jobs with `Job`, the aggregations and the windows;
connectors subclass `SourceSpec` and `SinkSpec`; the runtime drives `Program` and `VnodeRun`.
Semantics: `jobs.api` (the builder), `jobs.windows` (event time, watermarks, lateness),
`jobs.run` (per-event processing, errors, snapshots), `jobs.terminals` (outputs).
"""

from laminar_cluster.jobs.aggregations import Aggregation, Count, Max, Mean, Min, Sum
from laminar_cluster.jobs.api import (
    DEAD_LETTER,
    LATE,
    MAIN,
    STREAMS,
    Emit,
    Job,
    SinkSpec,
    SourceSpec,
)
from laminar_cluster.jobs.errors import BadEvent, StateNotEncodable, StepFailed
from laminar_cluster.jobs.program import Program, compile_job
from laminar_cluster.jobs.run import VnodeRun
from laminar_cluster.jobs.windows import WATERMARK_CLOSED_MS, Session, Sliding, Tumbling

__all__ = [
    "DEAD_LETTER",
    "LATE",
    "MAIN",
    "STREAMS",
    "WATERMARK_CLOSED_MS",
    "Aggregation",
    "BadEvent",
    "Count",
    "Emit",
    "Job",
    "Max",
    "Mean",
    "Min",
    "Program",
    "Session",
    "SinkSpec",
    "Sliding",
    "SourceSpec",
    "StateNotEncodable",
    "StepFailed",
    "Sum",
    "Tumbling",
    "VnodeRun",
    "compile_job",
]
