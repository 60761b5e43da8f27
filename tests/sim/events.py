"""The scenario's events and store-fault rates, drawn from the run's seed.

Every run with faults contains at least one of each `REQUIRED` event (a crash, a join, a
graceful leave and an injected store fault), each at a random instant of the fault phase,
plus `extra` events of any kind at random instants (`draw_schedule`, a pure function of the
seed and the config, so a test can check the schedules of every seed). A required event that
cannot happen at its instant (a join into a full cluster, a leave with two nodes left) is
tried again `RETRY_S` later, until it happens; a required store fault counts once a fault was
injected (its process may crash before the request that was to fail). A required crash or
leave that the cluster can never allow as it stands (too few nodes run, none is due to restart,
no join is still scheduled) makes a node join first (`make_room_for`). Each event acts on the
running simulation (`tests.sim.simulation.Simulation`):

* crash: a process is cancelled after a random number of loop turns (so at whatever await it
  reached); 80% are restarted 0.2-4 s later as a new boot, the rest stay down;
* join: a new node id starts (at most `NODES_MAX` members, counting pending restarts);
* leave: an active node leaves gracefully (draining, drained, left), if more than two run;
* fault: the next write (or read) of a running process fails, before it applied or after
  (a lost response), on top of this run's random per-request fault rates;
* cut: a process is cut off from the store (every request fails) for 0.5-4 s;
* slow: a process's store answers after up to 0.05-0.8 s for 1-4 s.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Final

from laminar_cluster.store.faulty import FaultConfig, FaultKind

if TYPE_CHECKING:
    from tests.sim.simulation import SimConfig, Simulation

NODES_MIN: Final = 3
NODES_MAX: Final = 6
REQUIRED: Final = ("crash", "join", "leave", "fault")  # in every run with faults
EXTRA_KINDS: Final = ("crash", "crash", "join", "leave", "fault", "cut", "slow")
RESTART_PROBABILITY: Final = 0.8
RETRY_S: Final = 0.25  # a required event that could not happen is tried again this much later
FAULT_CHECK_S: Final = 1.0  # a required store fault not injected by then is scheduled again


@dataclasses.dataclass(frozen=True, order=True)
class Planned:
    """One scenario event: `at_s` after the fault phase began."""

    at_s: float
    kind: str
    required: bool


def draw_schedule(seed: int, config: SimConfig) -> list[Planned]:
    """The fault phase's events, in time order: each `REQUIRED` kind once at a uniform instant
    of the phase, plus extra events of `EXTRA_KINDS` every `event_every_s` on average."""
    if not config.faults:
        return []
    rng = random.Random(f"laminar-sim-schedule-{seed}")  # its own stream: a pure function
    phase_s = config.fault_phase_s
    planned = [Planned(rng.uniform(0.0, phase_s), kind, True) for kind in REQUIRED]
    at_s = rng.expovariate(1 / config.event_every_s)
    while at_s < phase_s:
        planned.append(Planned(at_s, rng.choice(EXTRA_KINDS), False))
        at_s += rng.expovariate(1 / config.event_every_s)
    return sorted(planned)


def draw_rates(sim: Simulation) -> FaultConfig:
    """This run's store-fault rates (per request), for every process during the fault phase."""
    rng = sim.rng
    if not sim.config.faults:
        return FaultConfig()
    return FaultConfig(
        error_before_rate=rng.choice((0.0, 0.01, 0.03)),
        error_after_rate=rng.choice((0.0, 0.01, 0.02)),
        conflict_after_rate=rng.choice((0.0, 0.005)),
        phantom_conflict_rate=rng.choice((0.0, 0.005)),
    )


async def scheduled_event(sim: Simulation, kind: str) -> bool:
    """Perform one event of `kind` if the cluster allows it now; whether it happened."""
    running = sim.running()
    members = len(running) + sim.pending("restart")
    if kind == "crash" and len(running) > 1:
        return await crash(sim, sim.rng.choice(sorted(sim.tasks)))
    if kind == "join" and members < NODES_MAX:
        node_id = max(sim.processes) + 1
        sim.note(f"node {node_id} joins")
        sim.figures["joins"] += 1
        sim.figures["members_max"] = max(sim.figures["members_max"], members + 1)
        sim.start(node_id)
        return True
    if kind == "leave" and len(running) > 2:
        node_id = sim.rng.choice(running)
        if sim.processes[node_id].request_leave():
            sim.note(f"node {node_id} asked to leave")
            sim.figures["leaves"] += 1
            return True
        return False
    if kind == "fault" and running:
        store_fault(sim, sim.rng.choice(running))
        return True
    if kind == "cut" and running:
        cut(sim, sim.rng.choice(running))
        return True
    if kind == "slow" and running:
        slow(sim, sim.rng.choice(running))
        return True
    return False


RUNNING_NEEDED: Final = {"crash": 2, "leave": 3}  # running nodes each kind needs


async def make_room_for(sim: Simulation, kind: str) -> bool:
    """A node joins when a required `kind` can never happen otherwise: fewer nodes run than it
    needs and no restart is pending. Whether one joined."""
    needed = RUNNING_NEEDED.get(kind)
    if needed is None or len(sim.running()) + sim.pending("restart") >= needed:
        return False
    sim.note(f"a node joins so that the required {kind} can happen")
    return await scheduled_event(sim, "join")


async def crash(sim: Simulation, node_id: int) -> bool:
    count = sim.rng.randrange(sim.config.crash_turns_max)
    if not await sim.kill(node_id, after_turns=count):
        return False
    if sim.rng.random() < RESTART_PROBABILITY:
        delay = sim.rng.uniform(0.2, 4.0)
        sim.note(f"node {node_id} crashed after {count} turns; restart in {delay:.2f} s")
        sim.restart_later(node_id, delay)
    else:
        sim.note(f"node {node_id} crashed after {count} turns; stays down")
        sim.gone.add(node_id)
    return True


def store_fault(sim: Simulation, node_id: int) -> None:
    """The next write (or read) of `node_id`'s process fails: before it applied, or after."""
    store = sim.processes[node_id].store
    op = sim.rng.choice(("put", "put", "get", "list"))
    kind = FaultKind.BEFORE if op != "put" else sim.rng.choice(tuple(FaultKind))
    store.fail_next(kind, op=op)
    sim.figures["scripted_faults"] += 1
    sim.note(f"node {node_id}: its next {op} fails ({kind.value})")


def cut(sim: Simulation, node_id: int) -> None:
    store = sim.processes[node_id].store
    start = sim.clock.monotonic()
    length = sim.rng.uniform(0.5, 4.0)
    store.config = dataclasses.replace(store.config, outages=((start, start + length),))
    sim.figures["cutoffs"] += 1
    sim.note(f"node {node_id} cut off from the store for {length:.2f} s")


def slow(sim: Simulation, node_id: int) -> None:
    store = sim.processes[node_id].store
    latency = sim.rng.uniform(0.05, 0.8)
    store.config = dataclasses.replace(store.config, latency_s_min=0.0, latency_s_max=latency)
    length = sim.rng.uniform(1.0, 4.0)
    sim.figures["slow_windows"] += 1
    sim.note(f"node {node_id} store latency up to {latency:.2f} s for {length:.2f} s")

    async def restore() -> None:
        store.config = dataclasses.replace(store.config, latency_s_max=0.0)

    sim.later(length, "fault", restore)
