"""Rebalance node processes on one store, with their JSON-lines logs read incrementally.

Used by `bench rebalance` and the real-process test. Each start of a node is one `Run`: a
`python -m laminar_cluster.cli node ...` process whose stderr goes to its own file. `refresh()`
reads the complete lines appended since the last call (lines that are not JSON, a traceback
say, are kept for `tail` only). The durable state is read directly from the store
(`committed_head`), never through a node.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.clock import Clock
from laminar_cluster.errors import DeadlineExceeded
from laminar_cluster.store import ObjectStore

POLL_S: Final = 0.02
Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NodeTimings:
    """The `laminar-cluster node` options the fleet passes (seconds)."""

    ttl_s: float = 2.0
    poll_s: float = 0.2
    debounce_s: float = 0.5
    checkpoint_interval_s: float = 1.0
    retry_delay_s: float = 0.5
    drain_ack_timeout_s: float = 5.0
    leave_timeout_s: float = 60.0
    stats_interval_s: float = 0.0
    # None: the node's default. A remote store (S3) needs longer budgets and fewer polls.
    checkpoint_timeout_s: float | None = None
    checkpoint_poll_s: float | None = None
    prepare_timeout_s: float | None = None
    decision_timeout_s: float | None = None
    source_idle_s: float | None = None
    vnode_count: int | None = None  # None: the node's default (256)

    def options(self) -> list[str]:
        optional = (
            ("--checkpoint-timeout", self.checkpoint_timeout_s),
            ("--checkpoint-poll", self.checkpoint_poll_s),
            ("--prepare-timeout", self.prepare_timeout_s),
            ("--decision-timeout", self.decision_timeout_s),
            ("--source-idle", self.source_idle_s),
            ("--vnodes", self.vnode_count),
        )
        return [
            *("--ttl", str(self.ttl_s), "--poll", str(self.poll_s)),
            *("--debounce", str(self.debounce_s)),
            *("--checkpoint-interval", str(self.checkpoint_interval_s)),
            *("--retry-delay", str(self.retry_delay_s)),
            *("--drain-ack-timeout", str(self.drain_ack_timeout_s)),
            *("--leave-timeout", str(self.leave_timeout_s)),
            *("--stats-interval", str(self.stats_interval_s)),
            *(part for flag, value in optional if value is not None for part in (flag, str(value))),
        ]


# The stream node's timings (demo, bench pipeline, chaos): a 5 s lease ttl, shorter than the node
# command's default (10 s, chosen for the store bill) so that a killed node is recovered sooner,
# and the fleet's short checkpoint interval and polls.
STREAM_NODE_TIMINGS: Final = NodeTimings(ttl_s=5.0)


@dataclass
class Run:
    """One process start of one node."""

    node: int
    process: subprocess.Popen[bytes]
    log_path: Path
    events: list[Event] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    offset: int = 0

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def first(self, predicate: Callable[[Event], bool]) -> Event | None:
        return next((event for event in self.events if predicate(event)), None)

    @property
    def boot(self) -> str | None:
        acquired = self.first(lambda event: event["event"] == "acquired")
        return None if acquired is None else str(acquired["boot"])


class NodeFleet:
    """Node processes on one store (module docstring); `timings` None starts them with the
    node command's own defaults."""

    def __init__(self, store_url: str, log_dir: Path, timings: NodeTimings | None) -> None:
        self.store_url, self.log_dir, self.timings = store_url, log_dir, timings
        self.runs: list[Run] = []

    def start(self, node: int, extra_args: Sequence[str] = ()) -> Run:
        """Start a process of `node` (with `extra_args` after the timings)."""
        current = self.current(node)
        if current is not None and current.alive:
            raise RuntimeError(f"node {node} is already running")
        log_path = self.log_dir / f"node-{node}-run-{len(self.runs)}.log"
        command = [sys.executable, "-m", "laminar_cluster.cli", "node", "--store", self.store_url]
        timings = () if self.timings is None else self.timings.options()
        command += ["--node-id", str(node), *timings, *extra_args]
        with open(log_path, "ab") as stderr:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        run = Run(node=node, process=process, log_path=log_path)
        self.runs.append(run)
        return run

    def current(self, node: int) -> Run | None:
        return next((run for run in reversed(self.runs) if run.node == node), None)

    def live_runs(self) -> list[Run]:
        return [run for run in self.runs if run.alive]

    def signal(self, node: int, signum: signal.Signals) -> Run:
        run = self.current(node)
        if run is None or not run.alive:
            raise RuntimeError(f"node {node} is not running")
        run.process.send_signal(signum)
        return run

    def refresh(self) -> None:
        for run in self.runs:
            if not run.log_path.exists():
                continue
            with open(run.log_path, "rb") as file:
                file.seek(run.offset)
                chunk = file.read()
            complete = chunk.rfind(b"\n") + 1
            run.offset += complete
            for line in chunk[:complete].decode(errors="replace").splitlines():
                run.raw.append(line)
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict) and "event" in event:
                    run.events.append(event)

    def wait_until(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        """Poll `check` (after a refresh) until it holds; DeadlineExceeded naming `what`."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.refresh()
            if check():
                return
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"{what}: not reached in {timeout_s} s")
            time.sleep(POLL_S)

    async def until(
        self,
        what: str,
        check: Callable[[], Awaitable[bool]],
        *,
        clock: Clock,
        timeout_s: float,
        may_exit: Callable[[Run], bool] = lambda run: False,
        poll_s: float = 0.1,
    ) -> None:
        """Refresh the logs and await `check()` until it holds; DeadlineExceeded naming `what`
        with every run's log tail when `timeout_s` passes first, or when a node exited and
        `may_exit(run)` says it should not have."""
        deadline = clock.monotonic() + timeout_s
        while True:
            self.refresh()
            if await check():
                return
            for run in self.runs:
                if not run.alive and not may_exit(run):
                    raise DeadlineExceeded(
                        f"node {run.node} exited {run.process.returncode} while waiting for "
                        f"{what}\n{self.tail(30)}"
                    )
            if clock.monotonic() >= deadline:
                raise DeadlineExceeded(f"{what}: not in {timeout_s:.0f} s\n{self.tail(30)}")
            await clock.sleep(poll_s)

    def tail(self, lines: int = 40) -> str:
        """The last `lines` lines of every run's log, for a failure report."""
        self.refresh()
        parts = []
        for run in self.runs:
            code = run.process.poll()
            parts.append(f"--- node {run.node} ({run.log_path.name}, exit {code}) ---")
            parts.extend(run.raw[-lines:])
        return "\n".join(parts)

    def close(self, timeout_s: float = 10.0) -> None:
        """SIGKILL every live process and reap all of them."""
        for run in self.runs:
            if run.alive:
                run.process.kill()
        deadline = time.monotonic() + timeout_s
        for run in self.runs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.process.wait(timeout=max(0.1, deadline - time.monotonic()))

    def __enter__(self) -> NodeFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def committed_head(store: ObjectStore) -> AssignmentSnapshot | None:
    """The durable head if it is committed (None when empty or draining)."""
    head = await AssignmentSnapshotStore(store).load()
    return None if head is None or head.draining else head
