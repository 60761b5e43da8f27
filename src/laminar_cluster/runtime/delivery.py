"""`Deliverer`: the leader hands each committed checkpoint's job output to the job's sinks,
exactly once (docs/jobs.md, "Exactly once"; DC §1.9, DC-12).

A participant's output rides in its manifest (`runtime.job_processor`); it is committed once
the attempt's sink commit marker (`committed.json`, DC-12) names its SHA-256. The leader of the
moment delivers, per committed checkpoint in ascending order, each participant's records of
each sink's stream as one `Delivery`; every sink applies a delivery at most once (a Parquet or
JSON Lines object created only once, a PostgreSQL transaction with a marker row), so a delivery
repeated after a crash, or by a deposed leader that has not noticed yet, is a no-op.

Order: a checkpoint is delivered to a sink only after every earlier committed one was (each
delivery returned, applied now or before), so upserts by key apply in checkpoint order.
A job with a file source has one more sink, first: the record log, which takes the routed
events of the `exchange` stream (`connectors.exchange`: at least once into the log, each event
applied once by the stage reading it).

Where it starts: when it becomes leader (and after any failure) it asks each sink for the
highest checkpoint it has applied (`delivered_through`), lists the committed checkpoints from
the lowest of those (inclusive: a crash may have left that checkpoint half delivered;
`runtime.output.committed_checkpoints`, one listing) and delivers them; afterwards it delivers
each checkpoint its own leader commits, with no listing. A committed checkpoint whose marker is
not written yet (the next checkpoint call repairs it) stops the walk until it is.

Cost: per committed checkpoint, the marker and each participant's manifest are read (1 + N
GETs); a listing only at a change of leader or after a failure. Markers and manifests of
committed checkpoints are never deleted by retention (DC-13), so a sink that is down for long
loses nothing: delivery resumes where the sink stands.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, first_of, within_deadline
from laminar_cluster.codec import sha256_hex
from laminar_cluster.connectors.delivery import Delivery, SinkWriter
from laminar_cluster.coordinator.objects import gather_bounded, manifest_output, read_manifest
from laminar_cluster.coordinator.paths import manifest_path, sink_commit_path
from laminar_cluster.coordinator.sink_commits import read_sink_commit
from laminar_cluster.errors import CorruptRecord, LaminarError
from laminar_cluster.jobs import Emit
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.runtime.job_processor import decode_output
from laminar_cluster.runtime.output import committed_checkpoints

logger: Final = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobSink:
    """One sink of the job: the stream it takes and its open writer."""

    name: str
    stream: str
    writer: SinkWriter


async def committed_job_output(
    authority: LeaderLeaseStore, checkpoint_id: int
) -> list[tuple[int, list[Emit]]] | None:
    """Each participant's emits of committed checkpoint `checkpoint_id`, in node order; None
    while its marker is not written. CorruptRecord when a manifest's output is not the one the
    marker names."""
    store = authority.store
    marker = await read_sink_commit(store, checkpoint_id)
    if marker is None:
        return None
    attempt = marker.attempt

    async def output_of(node_id: int, digest: str) -> tuple[int, list[Emit]]:
        key = manifest_path(checkpoint_id, node_id)
        found = await read_manifest(store, attempt, node_id)
        if found is None:
            raise CorruptRecord(
                f"{key}: missing, though {sink_commit_path(checkpoint_id)} commits it", key=key
            )
        data = manifest_output(found[0], key=key)
        if sha256_hex(data) != digest:
            raise CorruptRecord(f"{key}: its output is not the one the marker commits", key=key)
        return node_id, decode_output(data, what=key)

    calls = [
        functools.partial(output_of, o.participant.node_id, o.output_sha256) for o in marker.outputs
    ]
    return await gather_bounded(calls)


class Deliverer:
    """Delivers committed job output to `sinks` while `leading()` (module docstring)."""

    def __init__(
        self,
        authority: LeaderLeaseStore,
        clock: Clock,
        job: str,
        sinks: Sequence[JobSink],
        *,
        leading: Callable[[], bool],
        poll_s: float = 5.0,
        timeout_s: float = 60.0,
    ) -> None:
        self.authority, self.clock, self.job, self.sinks = authority, clock, job, tuple(sinks)
        self.leading, self.poll_s, self.timeout_s = leading, poll_s, timeout_s
        self._next: int | None = None  # the next checkpoint to deliver (None: list first)
        self._known: set[int] = set()  # checkpoints our leader committed, not yet delivered
        self._wake = asyncio.Event()

    def committed(self, checkpoint_id: int) -> None:
        """Our leader committed `checkpoint_id`: deliver it soon."""
        self._known.add(checkpoint_id)
        self._wake.set()

    async def run(self, shutdown: asyncio.Event) -> None:
        """Deliver until `shutdown`; failures are logged and retried after `poll_s`. The
        sinks' writers are closed at the end."""
        try:
            await self._deliver_until(shutdown)
        finally:
            await self.close()

    async def _deliver_until(self, shutdown: asyncio.Event) -> None:
        while not shutdown.is_set():
            await self._wait(shutdown)
            if shutdown.is_set():
                break
            if not self.leading():
                self._next, self._known = None, set()
                continue
            try:
                await self.step(deadline=self.clock.monotonic() + self.timeout_s)
            except LaminarError as error:
                self._next = None  # start again from where the sinks stand
                logger.warning(
                    "job %s: delivery failed, retrying in %.1f s: %s", self.job, self.poll_s, error
                )

    async def step(self, *, deadline: float) -> None:
        """Deliver every committed checkpoint not yet delivered, ascending."""
        async with within_deadline(self.clock, deadline, f"job {self.job} delivery"):
            if self._next is None:
                start = await self._start(deadline)
                listed = await committed_checkpoints(self.authority)
                self._known.update(c for c in listed if c >= start)
                self._next = start
            for checkpoint_id in sorted(c for c in self._known if c >= self._next):
                if not await self._deliver(checkpoint_id, deadline):
                    break  # its marker is not written yet: the next checkpoint call repairs it
                self._next = checkpoint_id + 1
            self._known = {c for c in self._known if c >= self._next}

    async def _start(self, deadline: float) -> int:
        """The lowest checkpoint a sink may lack (0: nothing was delivered)."""
        through = [
            await sink.writer.delivered_through(self.job, deadline=deadline) for sink in self.sinks
        ]
        return min((0 if t is None else t) for t in through) if through else 0

    async def _deliver(self, checkpoint_id: int, deadline: float) -> bool:
        outputs = await committed_job_output(self.authority, checkpoint_id)
        if outputs is None:
            return False
        for sink in self.sinks:
            for node_id, emits in outputs:
                records = [emit.record for emit in emits if emit.stream == sink.stream]
                delivery = Delivery(self.job, checkpoint_id, node_id, records)
                await sink.writer.deliver(delivery, deadline=deadline)
        return True

    async def _wait(self, shutdown: asyncio.Event) -> None:
        """Until woken, `poll_s` or shutdown."""
        try:
            async with self.clock.timeout_at(self.clock.monotonic() + self.poll_s):
                await first_of(shutdown, self._wake)
        except TimeoutError:
            pass
        self._wake.clear()

    async def close(self) -> None:
        """Close every sink's writer."""
        for sink in self.sinks:
            await sink.writer.close()
