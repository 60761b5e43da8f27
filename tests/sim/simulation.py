"""The deterministic rebalance simulation: several nodes in one process, one seed.

`run_seed(seed)` builds a cluster of 3-5 simulated processes (`tests.sim.node`: real
`RebalanceNode`s; joins take it up to 6) over one `SimStore`, each behind its own seeded
`FaultyStore`, and drives them with one `SimClock`, in three phases:

1. Bootstrap, calm: until v1 is committed, adopted by every process and covered by a committed
   cluster checkpoint under its fence (the window before that, where recovery restores the
   initial state, is `test_owner_lost_before_first_checkpoint_converges`).
2. Faults (`fault_phase_s`): every store request may fail before or after it applied, at this
   run's seeded rates, and the seed's schedule (`tests.sim.events.draw_schedule`) crashes
   processes at any await, restarts them as new boots, adds and removes nodes, fails single
   store requests, cuts processes off the store and slows their store down. Every run has at
   least one crash, join, graceful leave and injected store fault; one the cluster cannot take
   yet (a leave with two nodes left) waits, and the phase with it. A process whose lease was
   fenced (or that exited on a store error) is restarted by a supervisor 0.5-2 s later.
3. Quiet: no more faults; the run ends as soon as the head equals rendezvous over the live
   assignable processes and every live process runs it, or fails after `quiet_max_s`.

After every step (every task runs until blocked, then time moves to the next live timer) the
checkers (`tests.sim.checkers`) look at the durable state. Time, the schedule, the faults and
the scenario all derive from the seed, so the event trace and the digest of every store write
replay exactly; a failure message starts with the seed and the command that replays it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from tests.sim import events
from tests.sim.checkers import Checkers
from tests.sim.events import NODES_MAX, NODES_MIN
from tests.sim.logs import counted_logs
from tests.sim.node import Exit, Moves, SimProcess
from tests.sim.scheduler import SimClock, settle, turns
from tests.sim.store import SimStore

REPLAY = "python -m tests.sim.run --seed {seed}"


@dataclass(frozen=True)
class SimConfig:
    """The shape of one run (simulated seconds). The defaults are the `make test` scenario:
    a calm bootstrap, a short burst of faults, then quiet until converged."""

    bootstrap_max_s: float = 15.0
    fault_phase_s: float = 2.0
    event_every_s: float = 2.0  # mean time between extra scenario events (beyond REQUIRED)
    required_wait_max_s: float = 6.0  # how long a required event may wait past the phase
    quiet_min_s: float = 0.5
    quiet_max_s: float = 30.0
    converge_poll_s: float = 0.5
    crash_turns_max: int = 60
    faults: bool = True  # False: no scenario events and no store faults (a calm cluster)


# The long form: ten times the fault phase, events a little more often, and room to converge
# after it. Runs of failing rotations pile up here (a graceful leave that cannot be served while
# owners crash): the decision-floor rule of LA-19 was found only by this shape.
LONG_FAULTS = SimConfig(fault_phase_s=20.0, event_every_s=1.5, quiet_max_s=60.0)


@dataclass
class SimResult:
    seed: int
    trace: list[str]
    digest: str
    figures: Counter[str]
    violations: list[str]
    warnings: Counter[str]
    long_faults: bool = False

    def failure_message(self) -> str:
        tail = "\n".join(self.trace[-40:])
        found = "\n".join(self.violations[:20])
        repeated = "\n".join(f"{n}x {w}" for w, n in self.warnings.most_common(6))
        return (
            f"seed={self.seed}: {len(self.violations)} checker failure(s); replay with "
            f"`{REPLAY.format(seed=self.seed)}{' --long-faults' if self.long_faults else ''}`"
            f"\n{found}\n-- trace tail --\n{tail}\n"
            f"-- most repeated warnings --\n{repeated}"
        )


def run_seed(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one seed to completion on a fresh event loop. An exception escaping the simulation
    (a livelock, a harness bug) becomes a failure of the run, so it still names its seed."""
    return run_simulation(Simulation(seed, config or SimConfig()))


def run_simulation(simulation: Simulation) -> SimResult:
    """Run a built simulation (a scripted subclass, say) as `run_seed` does."""
    with counted_logs(simulation.warnings):
        try:
            return asyncio.run(simulation.run())
        except Exception as error:  # reported with the seed, never lost
            detail = "".join(traceback.format_exception(error))
            simulation.checkers.fail(0, f"the simulation raised:\n{detail}")
            return simulation.result()


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
        self.rates = events.draw_rates(self)
        self.schedule = events.draw_schedule(seed, config)
        self.happened: set[str] = set()  # kinds of scenario events that took place
        self._timed: list[tuple[float, int, str, Callable[[], Awaitable[None]]]] = []
        self._order = itertools.count()
        self._group: asyncio.TaskGroup | None = None
        self._committed_seen = 0
        self.faults_on = False  # the bootstrap is calm

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> SimResult:
        async with asyncio.TaskGroup() as group:
            self._group = group
            # At most NODES_MAX - 1 at first, so the required join always fits.
            first = self.rng.randint(NODES_MIN, NODES_MAX - 1)
            self.figures["members_first"] = self.figures["members_max"] = first
            self.note(f"seed {self.seed}: {first} nodes, {self.vnode_count} vnodes")
            for node_id in range(1, first + 1):
                self.start(node_id)
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
        """The fault phase: store faults at this run's rates, and the scheduled events. It
        lasts `fault_phase_s`, longer while a required event waits for the cluster to allow it
        (at most `required_wait_max_s` more; a required event still missing then fails)."""
        config = self.config
        self.faults_on = config.faults
        for process in self.processes.values():
            process.store.config = self.rates
        start = self.clock.monotonic()
        fault_end = start + config.fault_phase_s
        give_up = fault_end + config.required_wait_max_s
        due = [(start + p.at_s, p.kind, p.required) for p in self.schedule]
        while True:
            # A required event is satisfied by any event of its kind (an extra one, say).
            due = [entry for entry in due if not (entry[2] and self._satisfied(entry[1]))]
            if self.clock.monotonic() >= fault_end and not any(entry[2] for entry in due):
                break
            if self.clock.monotonic() >= give_up:
                missing = sorted(kind for _, kind, required in due if required)
                self.checkers.fail(0, f"required scenario events never happened: {missing}")
                return
            upcoming = min((at for at, _, _ in due), default=fault_end)
            await self._step(until=min(max(upcoming, self.clock.monotonic()), give_up))
            now = self.clock.monotonic()
            later = []
            for at, kind, required in due:
                if at > now:
                    later.append((at, kind, required))
                elif await events.scheduled_event(self, kind):
                    self.happened.add(kind)
                    if required and not self._satisfied(kind):  # a fault not injected yet
                        later.append((now + events.FAULT_CHECK_S, kind, required))
                elif required:
                    joins_ahead = any(k == "join" and t > now for t, k, _ in due)
                    if not joins_ahead and await events.make_room_for(self, kind):
                        self.happened.add("join")
                    later.append((now + events.RETRY_S, kind, required))
            due = later

    def _satisfied(self, kind: str) -> bool:
        """Did an event of `kind` take place? A store fault counts once one was injected (the
        process whose next request was to fail may have crashed before making it)."""
        if kind == "fault":
            return any(sum(store.stats.injected.values()) for store in self.stores)
        return kind in self.happened

    def result(self) -> SimResult:
        self._finish_figures()
        jumps = Checkers(self.store.direct(), self.clock, self.vnode_count)
        jumps.committed = self.checkers.committed
        jumps.recovery_versions = self.checkers.recovery_versions
        jumps.check_jumps(self.moves.jumps)
        return SimResult(
            seed=self.seed,
            trace=self.trace,
            digest=self.store.objects.digest,
            figures=self.figures,
            violations=self.checkers.violations + jumps.violations,
            warnings=self.warnings,
            long_faults=self.config == LONG_FAULTS,
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
    def start(self, node_id: int) -> None:
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
            self.later(delay, "restart", lambda: self._restart(node_id))
        elif process.exit in (Exit.LEFT, Exit.LEAVE_TIMEOUT):
            self.note(f"node {node_id} exited ({process.exit.value})")
            self.gone.add(node_id)

    async def _restart(self, node_id: int) -> None:
        if node_id in self.tasks:
            return
        self.note(f"node {node_id} restarts")
        self.start(node_id)

    def _stop_all(self) -> None:
        for node_id, task in self.tasks.items():
            self.processes[node_id].exit = Exit.STOPPED
            task.cancel()

    # -- scenario events -----------------------------------------------------------------------
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

    def running(self) -> list[int]:
        """Node ids whose process runs and is active."""
        return sorted(n for n, p in self.processes.items() if n in self.tasks and p.active())

    def pending(self, kind: str) -> int:
        """How many timed actions of `kind` are due later."""
        return sum(1 for entry in self._timed if entry[2] == kind)

    def restart_later(self, node_id: int, delay_s: float) -> None:
        self.later(delay_s, "restart", lambda: self._restart(node_id))

    def later(self, delay: float, kind: str, action: Callable[[], Awaitable[None]]) -> None:
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
