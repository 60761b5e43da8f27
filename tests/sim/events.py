"""The scenario's random events and store-fault rates, drawn from the run's seeded RNG.

Each event acts on the running simulation (`tests.sim.simulation.Simulation`):

* crash: a process is cancelled after a random number of loop turns (so at whatever await it
  reached); 80% are restarted 0.2-4 s later as a new boot, the rest stay down;
* join: a new node id starts (at most `NODES_MAX` members, counting pending restarts);
* leave: an active node leaves gracefully (draining, drained, left), if more than two run;
* cut: a process is cut off from the store (every request fails) for 0.5-4 s;
* slow: a process's store answers after up to 0.05-0.8 s for 1-4 s.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

from laminar_cluster.store.faulty import FaultConfig

if TYPE_CHECKING:
    from tests.sim.simulation import Simulation

NODES_MIN: Final = 3
NODES_MAX: Final = 6
KINDS: Final = ("crash", "crash", "join", "leave", "cut", "slow")
RESTART_PROBABILITY: Final = 0.8


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


def next_event_at(sim: Simulation) -> float:
    return sim.clock.monotonic() + sim.rng.expovariate(1 / sim.config.event_every_s)


async def random_event(sim: Simulation) -> None:
    kind = sim.rng.choice(KINDS)
    running = sim.running()
    members = len(running) + sim.pending("restart")
    if kind == "crash" and len(running) > 1:
        await crash(sim, sim.rng.choice(sorted(sim.tasks)))
    elif kind == "join" and members < NODES_MAX:
        node_id = max(sim.processes) + 1
        sim.note(f"node {node_id} joins")
        sim.figures["joins"] += 1
        sim.start(node_id)
    elif kind == "leave" and len(running) > 2:
        node_id = sim.rng.choice(running)
        if sim.processes[node_id].request_leave():
            sim.note(f"node {node_id} asked to leave")
            sim.figures["leaves"] += 1
    elif kind == "cut" and running:
        cut(sim, sim.rng.choice(running))
    elif kind == "slow" and running:
        slow(sim, sim.rng.choice(running))


async def crash(sim: Simulation, node_id: int) -> None:
    count = sim.rng.randrange(sim.config.crash_turns_max)
    if not await sim.kill(node_id, after_turns=count):
        return
    if sim.rng.random() < RESTART_PROBABILITY:
        delay = sim.rng.uniform(0.2, 4.0)
        sim.note(f"node {node_id} crashed after {count} turns; restart in {delay:.2f} s")
        sim.restart_later(node_id, delay)
    else:
        sim.note(f"node {node_id} crashed after {count} turns; stays down")
        sim.gone.add(node_id)


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
