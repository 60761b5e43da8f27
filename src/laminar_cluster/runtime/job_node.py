"""`JobRuntime`: what a node needs to run a user's job (docs/jobs.md): the data plane (the
reference engine over the store's record log, each batch through a `JobProcessor`) and, on
the leader, the `Deliverer` of committed output to the job's sinks.

`load_job("my_pkg.jobs:clicks")` imports a job by its path, the way `--job` names it; every
way it can fail is one InvalidArgument line saying what to fix.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from laminar_cluster.clock import Clock
from laminar_cluster.connectors.delivery import Sink
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.exchange import EXCHANGE, ExchangeWriter
from laminar_cluster.connectors.file_catalog import FileCatalog, discover
from laminar_cluster.connectors.sources import EventLogSource, FileSource
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.jobs import Job, Program, compile_job
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.runtime.delivery import Deliverer, JobSink
from laminar_cluster.runtime.engine import StreamEngine
from laminar_cluster.runtime.engine_types import BatchReader, EngineConfig, SourceBatch, SourceLog
from laminar_cluster.runtime.file_splits import FileSplits, SplitLog, read_splits
from laminar_cluster.runtime.job_processor import JobProcessor
from laminar_cluster.store import ObjectStore, open_store

logger = logging.getLogger(__name__)


def load_job(path: str) -> Job:
    """The `Job` at `module:attribute`; the working directory is importable, as with `python
    -m`. InvalidArgument, one line, for a path that does not name a job."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidArgument(f"job {path!r}: write it as module:attribute, e.g. my_jobs:clicks")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # the user's module: any error is theirs to fix
        raise InvalidArgument(
            f"job {path}: module {module_name} does not import: {type(error).__name__}: {error}"
        ) from error
    job = getattr(module, attribute, None)
    if job is None:
        raise InvalidArgument(f"job {path}: module {module_name} has no attribute {attribute}")
    if not isinstance(job, Job):
        raise InvalidArgument(
            f"job {path}: {attribute} is of type {type(job).__name__}, not a laminar_cluster.Job"
        )
    return job


def connector_sinks(job: Job) -> list[Sink]:
    """The job's sinks, each a connector's `Sink` (InvalidArgument for another declaration)."""
    sinks = []
    for spec in job.sinks:
        if not isinstance(spec, Sink):
            raise InvalidArgument(
                f"job {job.name}: sink {spec.describe()} is not a laminar_cluster sink "
                "(ParquetSink, JsonLinesSink, PostgresSink)"
            )
        sinks.append(spec)
    return sinks


def source_store(source: FileSource, store: ObjectStore) -> ObjectStore:
    """The store holding a file source's files: the cluster's, or the one its url names."""
    return store if source.url is None else open_store(source.url)


async def discover_files(
    source: FileSource,
    splits: FileSplits,
    leading: Callable[[], bool],
    shutdown: asyncio.Event,
) -> None:
    """The leader's discovery of a file source's new files, every `discover_interval_s` while
    `leading()`, into the catalog the node's `splits` read (so the leader learns its own pages
    without reading them); failures are logged and tried again at the next interval."""
    catalog, files, clock = splits.catalog, splits.files, splits.clock
    while not shutdown.is_set():
        if leading():
            deadline = clock.monotonic() + max(source.discover_interval_s, 30.0)
            try:
                added = await discover(catalog, files, deadline=deadline)
            except LaminarError as error:
                logger.warning("file source %s: discovery failed: %s", source.prefix, error)
            else:
                if added:
                    logger.info("file source %s: %d new files", source.prefix, added)
        try:
            async with clock.timeout_at(clock.monotonic() + source.discover_interval_s):
                await shutdown.wait()
        except TimeoutError:
            pass


def read_records(log: EventLog) -> BatchReader:
    """The record log's reader: each batch's events are the records' JSON bytes."""

    async def read(partition: int, offset: int, max_events: int, *, deadline: float) -> SourceBatch:
        records, next_offset = await log.read_records(
            partition, offset, max_events, deadline=deadline
        )
        return SourceBatch(offset, next_offset, records)

    return read


@dataclass(slots=True)
class JobRuntime:
    """A compiled job and its node-side settings (seconds)."""

    program: Program
    idle_close_s: float | None = None  # close an idle vnode's windows (None: never)
    delivery_poll_s: float = 5.0
    on_fatal: Callable[[LaminarError], None] | None = None  # the node's stop
    processor: JobProcessor | None = field(default=None, init=False)
    deliverer: Deliverer | None = field(default=None, init=False)
    splits: FileSplits | None = field(default=None, init=False)  # a file source's, set by `plane`

    @classmethod
    def of(cls, job: Job, *, idle_close_s: float | None = None) -> JobRuntime:
        """Compile `job`; InvalidArgument if it is incomplete or names a source or sink this
        runtime cannot run."""
        program = compile_job(job)
        if not isinstance(job.source_spec, EventLogSource | FileSource):
            source = "none" if job.source_spec is None else job.source_spec.describe()
            raise InvalidArgument(
                f"job {job.name}: source {source} is not one a node runs; use EventLogSource() "
                "or FileSource(prefix)"
            )
        connector_sinks(job)
        return cls(program, idle_close_s=idle_close_s)

    @property
    def name(self) -> str:
        return self.program.job.name

    @property
    def file_source(self) -> FileSource | None:
        """The job's file source, None for an event log job."""
        source = self.program.job.source_spec
        return source if isinstance(source, FileSource) else None

    def plane(self, store: ObjectStore, clock: Clock, config: EngineConfig) -> StreamEngine:
        """The data plane: the store's record log (and a file source's splits) through this
        job."""
        log = EventLog(store, clock=clock)
        files = self.file_source
        processor = JobProcessor(
            self.program,
            clock,
            idle_close_s=self.idle_close_s,
            on_fatal=self.on_fatal,
            repartition=None if files is None else files.partitions,
        )
        source: SourceLog = log
        read = read_records(log)
        if files is not None:
            splits = FileSplits(
                FileCatalog(store, clock, files.prefix),
                source_store(files, store),
                clock,
                file_format=files.format,
                interval_s=files.discover_interval_s,
            )
            source = SplitLog(log, splits, files.partitions)
            read = read_splits(source, processor.routing_room)
            self.splits = splits
        engine = StreamEngine(
            clock=clock, log=source, processor=processor, config=config, read=read
        )
        processor.caught_up = engine.caught_up  # a paused or lagging vnode is not idle
        self.processor = processor
        return engine

    def open_deliverer(
        self, store: ObjectStore, authority: LeaderLeaseStore, leading: Callable[[], bool]
    ) -> Deliverer | None:
        """The leader's deliverer to the job's sinks (None: the job has none)."""
        sinks = [
            JobSink(sink.describe(), sink.stream, sink.open(store, authority.clock))
            for sink in connector_sinks(self.program.job)
        ]
        files = self.file_source
        if files is not None:  # the repartition first: it feeds the rest
            writer = ExchangeWriter(store, authority.clock, files.partitions)
            sinks.insert(0, JobSink("record log (repartition)", EXCHANGE, writer))
        if not sinks:
            return None
        self.deliverer = Deliverer(
            authority,
            authority.clock,
            self.name,
            sinks,
            leading=leading,
            poll_s=self.delivery_poll_s,
        )
        return self.deliverer
