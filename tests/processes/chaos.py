"""Chaos for stream nodes (issue 7 "What must show"): real `laminar-cluster node` processes on one
file:// store under random SIGKILL, restart, join and graceful leave while the workload is
produced; then every event must be committed exactly once.

One round (`run_chaos`), all choices drawn from `random.Random(seed)` (the seed is printed
first; the same seed replays the same schedule, though process timing still varies):

1. `first_nodes` nodes start and commit a first checkpoint (a recovery restores from one: a
   node lost before it leaves the cluster unable to recover, a known limitation); the rest of
   the workload is let into the log at a steady pace over the chaos window
   (`demo_producer.GatedEventLog`), so every action lands while events flow;
2. every `gap_s` (drawn) one action among those allowed: SIGKILL a live node (never below
   `live_min` live nodes), restart a stopped node id (a new boot of the same id), join a node id
   never started, or SIGTERM a live node (graceful leave; never below `live_min`). At most
   `live_max` processes run;
3. after the window the whole workload is let in and nodes are started until `first_nodes` run
   without a pending leave; the round waits until the last committed checkpoint covers every
   event, then checks the committed output against the independently computed aggregates
   (`demo_check`): every key's count and sum equal.

A node process may exit on its own only by being fenced (exit 3: it missed its own renewal
deadline and stopped, the designed safe outcome on an overloaded host); a `crashed` event or
any other exit fails the round. A leave that ends in its timeout (exit 4) is counted and shown,
not failed: a node SIGKILLed or fenced meanwhile can hold up a rotation past it on a loaded
host. `LAMINAR_NODE_LOG_LEVEL=INFO` makes the kept node logs show why a round stalled.
With `fault_rate` > 0 every node's store sits behind the fault-injecting wrapper
(`laminar-cluster node --fault-rate/--fault-seed/--fault-latency-ms`: errors before and after
a write applied, latency), each process with its own seed.

The pieces serve other rounds too: `ChaosRound` (the fleet and its seeded actions, with
`node_args` for every node, e.g. a user's `--job`), `first_commit` and `schedule` over any
`Gate` that lets the workload in; tests/processes/test_job_chaos.py runs a windowed job so.

    python -m tests.processes.chaos --minutes 60 [--seed S] [--fault-rate 0.02]

runs rounds back to back (seeds S, S+1, ...) until the time is up; exit 1 on the first failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from laminar_cluster.clock import RealClock
from laminar_cluster.harness.exactly_once import check_exactly_once
from laminar_cluster.harness.fleet import STREAM_NODE_TIMINGS, NodeFleet, Run
from laminar_cluster.harness.producer import GatedEventLog, produce_gated
from laminar_cluster.harness.workload import Workload, expected_aggregates
from laminar_cluster.store import open_store
from laminar_cluster.views.status import StatusReader, event_log_opener

TIMINGS = STREAM_NODE_TIMINGS
EXIT_FENCED = 3
EXIT_LEAVE_TIMEOUT = 4
POLL_S = 0.2
FIRST_COMMIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    chaos_s: float = 40.0
    events: int = 150_000
    partitions: int = 16
    keys: int = 2_000
    node_ids: tuple[int, ...] = (1, 2, 3, 4, 5)
    first_nodes: int = 3
    live_min: int = 2
    live_max: int = 5
    gap_s: tuple[float, float] = (1.0, 4.0)
    settle_s: float = 120.0
    fault_rate: float = 0.0
    fault_latency_ms: float = 0.0
    node_args: tuple[str, ...] = ()  # passed to every node process (a job: `--job ...`)


class Gate(Protocol):
    """What lets the workload into the log: `allow(n)` lets the first `n` events in (never
    fewer than before)."""

    async def allow(self, events: int) -> None: ...


class Verdict(Protocol):
    """A round's check of its results (`CheckResult` for the count/sum)."""

    @property
    def passed(self) -> bool: ...

    def describe(self) -> str: ...


@dataclass
class ChaosReport:
    seed: int
    actions: list[str] = field(default_factory=list)
    fenced_exits: int = 0
    leave_timeouts: int = 0
    check: Verdict | None = None
    elapsed_s: float = 0.0
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and self.check is not None and self.check.passed

    def describe(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [
            f"chaos seed {self.seed}: {verdict} in {self.elapsed_s:.1f} s; "
            f"{len(self.actions)} actions, {self.fenced_exits} self-fenced exits, "
            f"{self.leave_timeouts} leave timeouts"
        ]
        lines.extend(f"  {action}" for action in self.actions)
        if self.check is not None:
            lines.append(f"  {self.check.describe()}")
        if self.error is not None:
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)


class ChaosFailure(AssertionError):
    pass


def chaos_seed() -> int:
    """LAMINAR_CHAOS_SEED if set (a replay), else a fresh random seed."""
    found = os.environ.get("LAMINAR_CHAOS_SEED")
    return int(found) if found else random.SystemRandom().randrange(2**32)


class ChaosRound:
    """One round's fleet, seeded choices and actions (`act`, `top_up`, `check_exits`)."""

    def __init__(self, config: ChaosConfig, fleet: NodeFleet, report: ChaosReport) -> None:
        self.config, self.fleet, self.report = config, fleet, report
        self.rng = random.Random(config.seed)
        self.started = time.monotonic()
        self.leaving: set[int] = set()  # id(run) of runs we SIGTERMed
        self.killed: set[int] = set()  # id(run) of runs we SIGKILLed
        self.started_ids: set[int] = set()
        self.timed_out: set[int] = set()  # id(run) of leaves that ended in their timeout

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.started:6.1f} s  {text}"
        self.report.actions.append(line)
        print(f"chaos seed {self.config.seed}: {line}", flush=True)

    def start(self, node: int) -> None:
        config = self.config
        extra = list(config.node_args)
        if config.fault_rate > 0:
            seed = config.seed * 1_000 + len(self.fleet.runs)
            extra += [
                *("--fault-rate", str(config.fault_rate), "--fault-seed", str(seed)),
                *("--fault-latency-ms", str(config.fault_latency_ms)),
            ]
        self.fleet.start(node, extra)
        self.started_ids.add(node)

    def steady(self) -> list[Run]:
        """Live runs without a pending leave."""
        return [run for run in self.fleet.live_runs() if id(run) not in self.leaving]

    def check_exits(self) -> None:
        """Fail on a crash, or an exit we did not cause other than a self-fence."""
        self.fleet.refresh()
        for run in self.fleet.runs:
            crashed = run.first(lambda event: event["event"] == "crashed")
            if crashed is not None:
                raise ChaosFailure(f"node {run.node} crashed: {crashed.get('error')}")
            if run.alive or id(run) in self.killed:
                continue
            code = run.process.returncode
            if id(run) in self.leaving and code in (0, EXIT_LEAVE_TIMEOUT, -signal.SIGTERM):
                if code == EXIT_LEAVE_TIMEOUT and id(run) not in self.timed_out:
                    self.timed_out.add(id(run))  # counted once; a recovery takes its vnodes
                    self.report.leave_timeouts += 1
                    self.note(f"node {run.node} exited {code} (its leave timed out)")
                continue  # left; its leave timed out; or it was still starting, before its
                # signal handlers, and died of the SIGTERM
            if code == EXIT_FENCED:
                if id(run) not in self.leaving:
                    self.leaving.add(id(run))  # counted once
                    self.report.fenced_exits += 1
                    self.note(f"node {run.node} exited {code} (fenced itself)")
                continue
            raise ChaosFailure(f"node {run.node} exited {code} unexpectedly")

    def act(self) -> None:
        config, rng, fleet = self.config, self.rng, self.fleet
        steady, live = self.steady(), fleet.live_runs()
        stopped = [
            n for n in self.started_ids if (run := fleet.current(n)) is None or not run.alive
        ]
        fresh = [n for n in config.node_ids if n not in self.started_ids]
        choices: list[str] = []
        if len(steady) > config.live_min:
            choices += ["kill", "leave"]
        if len(live) < config.live_max and stopped:
            choices.append("restart")
        if len(live) < config.live_max and fresh:
            choices.append("join")
        if not choices:
            return
        action = rng.choice(sorted(choices))
        if action in ("kill", "leave"):
            pool = steady
            if action == "leave":  # a node that is up (its signal handlers installed)
                pool = [r for r in steady if r.first(lambda e: e["event"] == "active")] or steady
            run = rng.choice(sorted(pool, key=lambda r: r.node))
            if action == "kill":
                self.killed.add(id(run))
                fleet.signal(run.node, signal.SIGKILL)
                self.note(f"SIGKILL node {run.node}")
            else:
                self.leaving.add(id(run))
                fleet.signal(run.node, signal.SIGTERM)
                self.note(f"SIGTERM node {run.node} (graceful leave)")
        else:
            node = rng.choice(sorted(stopped if action == "restart" else fresh))
            self.start(node)
            self.note(f"{action} node {node}")

    def top_up(self) -> None:
        """Start nodes until `first_nodes` run without a pending leave."""
        for node in self.config.node_ids:
            if len(self.steady()) >= self.config.first_nodes:
                return
            run = self.fleet.current(node)
            if run is None or not run.alive:
                self.start(node)
                self.note(f"start node {node} for the final phase")


async def _chaos(config: ChaosConfig, workdir: Path, report: ChaosReport) -> None:
    clock = RealClock()
    url = f"file://{workdir}/store?fsync=false"
    store = open_store(url)
    workload = Workload(config.seed, config.events, config.partitions, config.keys)
    log = GatedEventLog(store, clock=clock)
    reader = StatusReader(store, clock, event_log_opener(clock))
    try:
        with NodeFleet(url, workdir, TIMINGS) as fleet:
            chaos = ChaosRound(config, fleet, report)
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(
                        produce_gated(
                            log, workload, deadline=clock.monotonic() + 600, batch_events=500
                        )
                    )
                    await first_commit(chaos, reader, log)
                    await schedule(chaos, log, config)
                    await log.allow(config.events)
                    chaos.top_up()
                    await _settle(chaos, reader, config)
            except* ChaosFailure as failures:
                raise ChaosFailure(f"{failures.exceptions[0]}\n{fleet.tail(25)}") from None
        expected = await asyncio.to_thread(expected_aggregates, workload)
        report.check = await check_exactly_once(
            store, clock, workload, deadline=clock.monotonic() + 300, expected=expected
        )
    finally:
        await store.close()


async def first_commit(chaos: ChaosRound, reader: StatusReader, log: Gate) -> None:
    """Start the first nodes and wait for a committed checkpoint that holds events.

    Chaos starts only then, so every recovery it provokes restores committed events (a node
    lost before the first commit is recovered to the initial state, LA-20: nothing committed
    to restore; the rebalance tests and the simulation cover that window)."""
    config = chaos.config
    for node in config.node_ids[: config.first_nodes]:
        chaos.start(node)
    await log.allow(config.events // 20)
    deadline = time.monotonic() + FIRST_COMMIT_TIMEOUT_S
    while True:
        chaos.check_exits()
        view = await reader.read(timeout_s=10.0)
        if view.checkpoint is not None and view.checkpoint["committed_events"] > 0:
            chaos.note(f"first commit: {view.checkpoint['committed_events']:,} events")
            return
        if time.monotonic() >= deadline:
            raise ChaosFailure(f"no committed checkpoint in {FIRST_COMMIT_TIMEOUT_S} s")
        await asyncio.sleep(POLL_S)


async def schedule(chaos: ChaosRound, log: Gate, config: ChaosConfig) -> None:
    """Over `chaos_s`, let the workload in at a steady pace (each POLL_S) and act every
    `gap_s` (drawn)."""
    begin = time.monotonic()
    next_action = begin + chaos.rng.uniform(*config.gap_s)
    while (elapsed := time.monotonic() - begin) < config.chaos_s:
        await log.allow(int(config.events * elapsed / config.chaos_s))
        chaos.check_exits()
        if time.monotonic() >= next_action:
            chaos.act()
            next_action = time.monotonic() + chaos.rng.uniform(*config.gap_s)
        await asyncio.sleep(POLL_S)


async def gated_round(
    chaos: ChaosRound,
    reader: StatusReader,
    gate: Gate,
    settle: Callable[[], Awaitable[None]],
    *,
    all_in: str,
) -> None:
    """A round over a gated workload: the first commit, the schedule, the rest of the
    workload (noted as `all_in`), every node up again, then `settle`; a ChaosFailure carries
    the fleet's last log lines."""
    config = chaos.config
    try:
        await first_commit(chaos, reader, gate)
        await schedule(chaos, gate, config)
        await gate.allow(config.events)
        chaos.note(all_in)
        chaos.top_up()
        await settle()
    except ChaosFailure as failure:
        raise ChaosFailure(f"{failure}\n{chaos.fleet.tail(25)}") from None


async def _settle(chaos: ChaosRound, reader: StatusReader, config: ChaosConfig) -> None:
    deadline = time.monotonic() + config.settle_s
    committed = 0
    while committed < config.events:
        if time.monotonic() >= deadline:
            raise ChaosFailure(
                f"{committed:,} of {config.events:,} events committed after {config.settle_s} s"
            )
        chaos.check_exits()
        chaos.top_up()
        view = await reader.read(timeout_s=10.0)
        if view.checkpoint is not None:
            committed = int(view.checkpoint["committed_events"])
        await asyncio.sleep(POLL_S)
    chaos.note(f"all {config.events:,} events committed")


def run_chaos(config: ChaosConfig, workdir: Path | None = None) -> ChaosReport:
    """One round; the report (its `passed`, `describe()`)."""
    print(f"chaos seed {config.seed} (fault rate {config.fault_rate})", flush=True)
    report = ChaosReport(seed=config.seed)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-")))
        try:
            asyncio.run(_chaos(config, workdir, report))
        except ChaosFailure as failure:
            report.error = str(failure)
        report.elapsed_s = time.monotonic() - started
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Chaos rounds of stream nodes (soak).")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--fault-latency-ms", type=float, default=0.0)
    parser.add_argument("--chaos-s", type=float, default=60.0, help="chaos window per round")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    end = time.monotonic() + args.minutes * 60
    rounds = 0
    while time.monotonic() < end:
        config = ChaosConfig(
            seed=seed + rounds,
            chaos_s=args.chaos_s,
            fault_rate=args.fault_rate,
            fault_latency_ms=args.fault_latency_ms,
        )
        report = run_chaos(config)
        print(report.describe(), flush=True)
        rounds += 1
        if not report.passed:
            sys.exit(1)
    print(f"{rounds} rounds passed (seeds {seed}..{seed + rounds - 1})")


if __name__ == "__main__":
    main()
