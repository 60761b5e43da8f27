"""laminar-cluster: partitioned, exactly-once stream processing over an object store.

The public API is exactly the names in `__all__` (docs/jobs.md): what a job is built from, the
producer that feeds its event log, its sinks, and the errors a job author handles. Everything
else is internal and may change without notice. The names are imported on first use, so
`import laminar_cluster` stays light and the optional extras (pyarrow for Parquet, psycopg for
PostgreSQL) load only when their sink is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

__version__ = "0.1.0"

# Public name -> the module that defines it (the one place the public API is listed).
PUBLIC: Final[dict[str, str]] = {
    # declaring a job (laminar_cluster.jobs: pure, no I/O)
    "Job": "laminar_cluster.jobs",
    "Count": "laminar_cluster.jobs",
    "Sum": "laminar_cluster.jobs",
    "Min": "laminar_cluster.jobs",
    "Max": "laminar_cluster.jobs",
    "Mean": "laminar_cluster.jobs",
    "Tumbling": "laminar_cluster.jobs",
    "Sliding": "laminar_cluster.jobs",
    "Session": "laminar_cluster.jobs",
    "Emit": "laminar_cluster.jobs",
    "MAIN": "laminar_cluster.jobs",
    "LATE": "laminar_cluster.jobs",
    "DEAD_LETTER": "laminar_cluster.jobs",
    "BadEvent": "laminar_cluster.jobs",
    "StepFailed": "laminar_cluster.jobs",
    "StateNotEncodable": "laminar_cluster.jobs",
    # sources and sinks (laminar_cluster.connectors: with I/O)
    "EventLogSource": "laminar_cluster.connectors.sources",
    "FileSource": "laminar_cluster.connectors.sources",
    "Producer": "laminar_cluster.connectors.producer",
    "partition_of_key": "laminar_cluster.connectors.eventlog_records",
    "ParquetSink": "laminar_cluster.connectors.files",
    "JsonLinesSink": "laminar_cluster.connectors.files",
    "PostgresSink": "laminar_cluster.connectors.postgres",
    "Sink": "laminar_cluster.connectors.delivery",
    "SinkWriter": "laminar_cluster.connectors.delivery",
    "Delivery": "laminar_cluster.connectors.delivery",
    "open_store": "laminar_cluster.store",
    # errors a caller tells apart
    "LaminarError": "laminar_cluster.errors",
    "InvalidArgument": "laminar_cluster.errors",
}

__all__ = [
    "DEAD_LETTER",
    "LATE",
    "MAIN",
    "BadEvent",
    "Count",
    "Delivery",
    "Emit",
    "EventLogSource",
    "FileSource",
    "InvalidArgument",
    "Job",
    "JsonLinesSink",
    "LaminarError",
    "Max",
    "Mean",
    "Min",
    "ParquetSink",
    "PostgresSink",
    "Producer",
    "Session",
    "Sink",
    "SinkWriter",
    "Sliding",
    "StateNotEncodable",
    "StepFailed",
    "Sum",
    "Tumbling",
    "open_store",
    "partition_of_key",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` loads them
    from laminar_cluster.connectors.delivery import Delivery, Sink, SinkWriter
    from laminar_cluster.connectors.eventlog_records import partition_of_key
    from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
    from laminar_cluster.connectors.postgres import PostgresSink
    from laminar_cluster.connectors.producer import Producer
    from laminar_cluster.connectors.sources import EventLogSource, FileSource
    from laminar_cluster.errors import InvalidArgument, LaminarError
    from laminar_cluster.jobs import (
        DEAD_LETTER,
        LATE,
        MAIN,
        BadEvent,
        Count,
        Emit,
        Job,
        Max,
        Mean,
        Min,
        Session,
        Sliding,
        StateNotEncodable,
        StepFailed,
        Sum,
        Tumbling,
    )
    from laminar_cluster.store import open_store


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'laminar_cluster' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *PUBLIC])
