"""The deterministic rebalance simulation: several nodes in one process, one seed.

`run_seed(seed)` builds a cluster of 3-6 simulated processes (`tests.sim.node`) over one
`SimStore`, each behind its own seeded `FaultyStore`, and drives them with one `SimClock`:

1. Fault phase (`fault_phase_s`): at random instants (the scenario's own `random.Random(seed)`)
   a process crashes at an arbitrary await (cancelled after a random number of loop turns) and
   is restarted later as a new boot (or stays dead), a node joins, a node leaves gracefully, a
   process is cut off from the store for a while, or its store answers slowly. Every store
   request may also fail before or after it applied, at per-process seeded rates. A process
   whose lease was fenced is restarted by a supervisor after a short delay.
2. Quiet phase: no more faults; the run ends as soon as the head equals rendezvous over the
   live assignable processes and every live process runs it, or fails after `quiet_max_s`.

After every step (time moves to the next timer, then every task runs until blocked) the
checkers (`tests.sim.checkers`) look at the durable state. Time, the schedule, the faults and
the scenario all derive from the seed, so the event trace and the digest of every store write
replay exactly; a failure message starts with the seed and the command that replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import logging
import random
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from tests.sim.checkers import Checkers
from tests.sim.node import Exit, Moves, SimProcess
from tests.sim.scheduler import SimClock, settle, turns
from tests.sim.store import SimStore

REPLAY = "python -m tests.sim.run --seed {seed}"
NODES_MIN = 3
NODES_MAX = 6


@dataclass(frozen=True)
class SimConfig:
    """The shape of one run (simulated seconds). The defaults are the `make test` scenario:
    a calm bootstrap, a short burst of faults, then quiet until converged."""

    bootstrap_max_s: float = 15.0
    fault_phase_s: float = 2.0
    event_every_s: float = 0.8  # mean time between scenario events
    quiet_min_s: float = 0.5
    quiet_max_s: float = 30.0
    converge_poll_s: float = 0.5
    crash_turns_max: int = 60
    faults: bool = True  # False: no scenario events and no store faults (a calm cluster)


@dataclass
class SimResult:
    seed: int
    trace: list[str]
    digest: str
    figures: Counter[str]
    violations: list[str]
    warnings: Counter[str]

    def failure_message(self) -> str:
        tail = "\n".join(self.trace[-40:])
        found = "\n".join(self.violations[:20])
        repeated = "\n".join(f"{n}x {w}" for w, n in self.warnings.most_common(6))
        return (
            f"seed={self.seed}: {len(self.violations)} checker failure(s); replay with "
            f"`{REPLAY.format(seed=self.seed)}`\n{found}\n-- trace tail --\n{tail}\n"
            f"-- most repeated warnings --\n{repeated}"
        )


def run_seed(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one seed to completion on a fresh event loop. An exception escaping the simulation
    (a livelock, a harness bug) becomes a failure of the run, so it still names its seed."""
    return run_simulation(Simulation(seed, config or SimConfig()))


def run_simulation(simulation: Simulation) -> SimResult:
    """Run a built simulation (a scripted subclass, say) as `run_seed` does."""
    with _counted_logs(simulation.warnings):
        try:
            return asyncio.run(simulation.run())
        except Exception as error:  # reported with the seed, never lost
            detail = "".join(traceback.format_exception(error))
            simulation.checkers.fail(0, f"the simulation raised:\n{detail}")
            return simulation.result()


class _WarningCounter(logging.Handler):
    """Counts the library's warnings by message: a failing run shows its most repeated ones
    (a node stuck retrying the same step names the step)."""

    def __init__(self, counts: Counter[str]) -> None:
        super().__init__(logging.WARNING)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.name.rsplit('.', 1)[-1]}: {record.getMessage()[:240]}"] += 1


@contextlib.contextmanager
def _counted_logs(counts: Counter[str]) -> Iterator[None]:
    """The nodes log every retried failure; thousands of runs would drown the output, so the
    library's records are counted here and not propagated."""
    root = logging.getLogger("laminar_cluster")
    level, propagate = root.level, root.propagate
    handler = _WarningCounter(counts)
    root.setLevel(logging.WARNING)
    root.propagate = False
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        root.propagate = propagate


class Simulation:
    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.clock = SimClock(seed=seed)
        self.started_s = self.clock.monotonic()
        self.store = SimStore.fresh(self.clock)
        self.vnode_count = self.rng.choice((8, 16, 32))
        self.checkers = Checkers(
            self.store.direct(), self.clock, self.vnode_count, origin_s=self.started_s
        )
        self.moves = Moves(origin_s=self.started_s)
        self.trace: list[str] = []
        self.figures: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()  # the library's warnings by message
        self.processes: dict[int, SimProcess] = {}  # the latest boot of each node id
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.stores: list[FaultyStore] = []  # every boot's, for the fault figures
        self.gone: set[int] = set()  # crashed for good, or left
        self.rates = self._draw_rates()
        self._timed: list[tuple[float, int, str, Callable[[], Awaitable[None]]]] = []
        self._order = itertools.count()
        self._group: asyncio.TaskGroup | None = None
        self._committed_seen = 0
        self.faults_on = False  # the bootstrap is calm

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> SimResult:
        async with asyncio.TaskGroup() as group:
            self._group = group
            first = self.rng.randint(NODES_MIN, NODES_MAX)
            self.note(f"seed {self.seed}: {first} nodes, {self.vnode_count} vnodes")
            for node_id in range(1, first + 1):
                self._start(node_id)
            if await self._bootstrap():
                await self._faults()
                await self._quiet()
            self._stop_all()
        # Once more over everything retained (a decision pruned under a retained version
        # would otherwise wait for the next assignment write to be noticed).
        await self.checkers.check_history()
        await self.checkers.check_backing()
        return self.result()

    async def _bootstrap(self) -> bool:
        """A calm start: until v1 is committed, run by every process, and covered by a
        committed cluster checkpoint under its fence (so recovery has a cut)."""
        deadline = self.clock.monotonic() + self.config.bootstrap_max_s
        while self.clock.monotonic() < deadline:
            await self._step(until=min(self.clock.monotonic() + 0.25, deadline))
            if self._bootstrapped():
                self.note("bootstrapped: v1 adopted everywhere and checkpointed")
                return True
        self.checkers.fail(5, f"the cluster did not bootstrap in {self.config.bootstrap_max_s} s")
        return False

    def _bootstrapped(self) -> bool:
        committed = self.checkers.committed
        if not committed:
            return False
        head = max(committed)
        running = [self.processes[n] for n in self.tasks]
        if any(p.engine is None or p.engine.registry().version != head for p in running):
            return False
        fence = self.checkers.last_commit_fence
        return fence is not None and fence == snapshot_fence(committed[head])

    async def _faults(self) -> None:
        """The fault phase: store faults at this run's rates, and scenario events."""
        config = self.config
        self.faults_on = config.faults
        for process in self.processes.values():
            process.store.config = self.rates
        fault_end = self.clock.monotonic() + config.fault_phase_s
        next_event = self._next_event_at()
        while self.clock.monotonic() < fault_end:
            await self._step(until=min(next_event, fault_end))
            if self.clock.monotonic() >= next_event:
                if config.faults:
                    await self._random_event()
                next_event = self._next_event_at()

    def result(self) -> SimResult:
        self._finish_figures()
        jumps = Checkers(self.store.direct(), self.clock, self.vnode_count)
        jumps.committed = self.checkers.committed
        jumps.check_jumps(self.moves.jumps)
        return SimResult(
            seed=self.seed,
            trace=self.trace,
            digest=self.store.objects.digest,
            figures=self.figures,
            violations=self.checkers.violations + jumps.violations,
            warnings=self.warnings,
        )

    async def _step(self, *, until: float) -> None:
        """Run until blocked, check, then move time to the next timer (or `until`)."""
        await settle()
        await self._after_step()
        self.figures["steps"] += 1
        upcoming = self.clock.next_live_deadline()
        timed = self._timed[0][0] if self._timed else None
        target = until
        for instant in (upcoming, timed):
            if instant is not None:
                target = min(target, instant)
        self.clock.advance_to(target)
        while self._timed and self._timed[0][0] <= self.clock.monotonic():
            _, _, _, action = heapq.heappop(self._timed)
            await action()

    async def _after_step(self) -> None:
        await self.checkers.after_step()
        committed = self.checkers.committed
        if len(committed) != self._committed_seen:
            self._committed_seen = len(committed)
            head = max(committed)
            owners = sorted(set(committed[head].owners))
            self.note(f"committed v{head} owned by {owners}")
        for node_id, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[node_id]
                await self._exited(self.processes[node_id])

    async def _quiet(self) -> None:
        """Faults stop; converge or fail after `quiet_max_s`."""
        config = self.config
        self.faults_on = False
        self._timed = [entry for entry in self._timed if entry[2] in ("restart", "leave")]
        heapq.heapify(self._timed)
        for process in self.processes.values():
            process.store.config = FaultConfig()
        start = self.clock.monotonic()
        self.note("faults stop")
        deadline = start + config.quiet_max_s
        next_look = start + config.quiet_min_s
        while self.clock.monotonic() < deadline:
            await self._step(until=min(next_look, deadline))
            if self.clock.monotonic() >= next_look:
                next_look += config.converge_poll_s
                if await self._converged():
                    self.note(f"converged after {self.clock.monotonic() - start:.1f} s quiet")
                    self.figures["quiet_s"] = round(self.clock.monotonic() - start)
                    return
        live = self._live()
        participants = [p.participant for p in live if p.participant is not None]
        before = len(self.checkers.violations)
        await self.checkers.check_converged(participants)
        if len(self.checkers.violations) == before:
            head = max(self.checkers.committed, default=0)
            lagging = {
                p.node_id: None if p.engine is None else p.engine.registry().version
                for p in live
                if p.engine is None or p.engine.registry().version != head
            }
            pending = sorted({entry[2] for entry in self._timed})
            self.checkers.fail(
                5,
                f"head v{head} is rendezvous over the live nodes, but after "
                f"{config.quiet_max_s} s quiet processes still run older versions {lagging} "
                f"or actions are pending {pending}",
            )

    def _live(self) -> list[SimProcess]:
        return [p for p in self.processes.values() if p.active()]

    async def _converged(self) -> bool:
        live = self._live()
        if not live or self._timed or len(live) != len(self.tasks):
            return False  # a restart is due, or a process is still joining or leaving
        probe = Checkers(self.store.direct(), self.clock, self.vnode_count, origin_s=self.started_s)
        participants = [p.participant for p in live if p.participant is not None]
        await probe.check_converged(participants)
        if probe.violations:
            return False
        head = max(self.checkers.committed, default=0)
        return all(p.engine is not None and p.engine.registry().version == head for p in live)

    # -- processes -----------------------------------------------------------------------------
    def _start(self, node_id: int) -> None:
        assert self._group is not None
        store = FaultyStore(
            self.store,
            clock=self.clock,
            seed=self.rng.getrandbits(32),
            config=self.rates if self.faults_on else FaultConfig(),
        )
        process = SimProcess(
            node_id=node_id,
            store=store,
            clock=self.clock,
            vnode_count=self.vnode_count,
            moves=self.moves,
            on_event=self.note,
        )
        self.processes[node_id] = process
        self.stores.append(store)
        self.tasks[node_id] = self._group.create_task(self._guarded(process))
        self.gone.discard(node_id)
        self.figures["boots"] += 1

    async def _guarded(self, process: SimProcess) -> None:
        try:
            await process.run()
        except Exception as error:  # a bug: report it as a checker failure
            self.checkers.fail(0, f"node {process.node_id} raised {error!r}")
            process.exit = Exit.STOPPED

    async def _exited(self, process: SimProcess) -> None:
        node_id = process.node_id
        self.figures[f"exit_{process.exit.name.lower()}"] += 1
        if process.exit in (Exit.FENCED, Exit.ERROR):
            delay = self.rng.uniform(0.5, 2.0)
            self.note(f"node {node_id} exited ({process.exit.value}); restart in {delay:.2f} s")
            self._later(delay, "restart", lambda: self._restart(node_id))
        elif process.exit in (Exit.LEFT, Exit.LEAVE_TIMEOUT):
            self.note(f"node {node_id} exited ({process.exit.value})")
            self.gone.add(node_id)

    async def _restart(self, node_id: int) -> None:
        if node_id in self.tasks:
            return
        self.note(f"node {node_id} restarts")
        self._start(node_id)

    def _stop_all(self) -> None:
        for node_id, task in self.tasks.items():
            self.processes[node_id].exit = Exit.STOPPED
            task.cancel()

    # -- scenario events -----------------------------------------------------------------------
    def _draw_rates(self) -> FaultConfig:
        rng = self.rng
        if not self.config.faults:
            return FaultConfig()
        return FaultConfig(
            error_before_rate=rng.choice((0.0, 0.01, 0.03)),
            error_after_rate=rng.choice((0.0, 0.01, 0.02)),
            conflict_after_rate=rng.choice((0.0, 0.005)),
            phantom_conflict_rate=rng.choice((0.0, 0.005)),
        )

    def _next_event_at(self) -> float:
        return self.clock.monotonic() + self.rng.expovariate(1 / self.config.event_every_s)

    def _running(self) -> list[int]:
        return sorted(n for n, p in self.processes.items() if n in self.tasks and p.active())

    async def _random_event(self) -> None:
        kinds = ["crash", "crash", "join", "leave", "cut", "slow"]
        kind = self.rng.choice(kinds)
        running = self._running()
        members = len(running) + sum(1 for entry in self._timed if entry[2] == "restart")
        if kind == "crash" and len(running) > 1:
            await self._crash(self.rng.choice(sorted(self.tasks)))
        elif kind == "join" and members < NODES_MAX:
            node_id = max(self.processes) + 1
            self.note(f"node {node_id} joins")
            self.figures["joins"] += 1
            self._start(node_id)
        elif kind == "leave" and len(running) > 2:
            node_id = self.rng.choice(running)
            if self.processes[node_id].request_leave():
                self.note(f"node {node_id} asked to leave")
                self.figures["leaves"] += 1
        elif kind == "cut" and running:
            self._cut(self.rng.choice(running))
        elif kind == "slow" and running:
            self._slow(self.rng.choice(running))

    async def _crash(self, node_id: int) -> None:
        count = self.rng.randrange(self.config.crash_turns_max)
        if not await self.kill(node_id, after_turns=count):
            return
        if self.rng.random() < 0.8:
            delay = self.rng.uniform(0.2, 4.0)
            self.note(f"node {node_id} crashed after {count} turns; restart in {delay:.2f} s")
            self._later(delay, "restart", lambda: self._restart(node_id))
        else:
            self.note(f"node {node_id} crashed after {count} turns; stays down")
            self.gone.add(node_id)

    async def kill(self, node_id: int, *, after_turns: int) -> bool:
        """Cancel every task of `node_id`'s process after `after_turns` loop turns (so at
        whatever await it reached); False when it had already exited by then."""
        process = self.processes[node_id]
        task = self.tasks[node_id]
        await turns(after_turns)
        if task.done():
            return False
        task.cancel()
        await asyncio.wait({task})
        del self.tasks[node_id]
        process.exit = Exit.CRASHED
        self.figures["crashes"] += 1
        return True

    def restart_later(self, node_id: int, delay_s: float) -> None:
        self._later(delay_s, "restart", lambda: self._restart(node_id))

    def _cut(self, node_id: int) -> None:
        process = self.processes[node_id]
        start = self.clock.monotonic()
        length = self.rng.uniform(0.5, 4.0)
        store = process.store
        store.config = dataclasses.replace(store.config, outages=((start, start + length),))
        self.figures["cutoffs"] += 1
        self.note(f"node {node_id} cut off from the store for {length:.2f} s")

    def _slow(self, node_id: int) -> None:
        process = self.processes[node_id]
        store = process.store
        latency = self.rng.uniform(0.05, 0.8)
        store.config = dataclasses.replace(store.config, latency_s_min=0.0, latency_s_max=latency)
        length = self.rng.uniform(1.0, 4.0)
        self.figures["slow_windows"] += 1
        self.note(f"node {node_id} store latency up to {latency:.2f} s for {length:.2f} s")

        async def restore() -> None:
            store.config = dataclasses.replace(store.config, latency_s_max=0.0)

        self._later(length, "fault", restore)

    def _later(self, delay: float, kind: str, action: Callable[[], Awaitable[None]]) -> None:
        entry = (self.clock.monotonic() + delay, next(self._order), kind, action)
        heapq.heappush(self._timed, entry)

    # -- output --------------------------------------------------------------------------------
    def note(self, message: str) -> None:
        self.trace.append(f"t={self.clock.monotonic() - self.started_s:7.3f} {message}")

    def _finish_figures(self) -> None:
        stats = self.checkers.stats
        figures = self.figures
        figures["committed_versions"] = stats.committed_versions
        figures["drain_commits"] = stats.drain_commits
        figures["drain_aborts"] = stats.drain_aborts
        figures["recoveries"] = stats.recoveries
        figures["checkpoints"] = stats.checkpoints
        figures["adoptions"] = self.moves.adoptions
        figures["sim_s"] = round(self.clock.monotonic() - self.started_s)
        injected: Counter[str] = Counter()
        for store in self.stores:
            for kind, count in store.stats.injected.items():
                injected[f"fault_{kind.value}"] += count
        figures.update(
            {f"fault_{kind.value}": injected[f"fault_{kind.value}"] for kind in FaultKind}
        )
        figures["faults"] = sum(injected.values())
