"""The deterministic rebalance simulation (`tests.sim`): seeded runs of 3-6 real nodes with
joins, leaves, crashes at any await, restarts, cut-offs and store faults, checked after every
step (checkers 1-5, `tests.sim.checkers`).

* `test_seed`: `LAMINAR_SIM_FAST_SEEDS` (default 2,000) seeds, one test each. Their runs start
  when the session's collection ends, on one worker per core at idle CPU priority, and go on
  while the rest of the suite runs (`tests.sim.ahead`); each test asserts its own seed's
  result: no checker failure, and the run did contain a crash, a join, a graceful leave and
  injected store faults, with 3-5 members at first and at most 6. More seeds:
  `python -m tests.sim.run --seeds 0..99999`.
* `test_every_schedule_has_every_required_event`: the scenario schedules of those seeds (and
  of every 10th soak seed) each plan every required event inside the fault phase.
* `test_same_seed_same_trace`: one seed twice in this process, and once in a fresh process with
  another hash seed, gives the same event trace and the same digest of every store write.
* `test_soak` (`pytest -m soak`): `LAMINAR_SIM_SEEDS` seeds (default 100,000) from
  `LAMINAR_SIM_START` (default 0). The same runs are `python -m tests.sim.run --seeds A..B`.
* `test_long_fault_phase_seed`: `LAMINAR_SIM_LONG_SEEDS` (default 50) seeds of the long shape
  (`simulation.LONG_FAULTS`: a 20 s fault phase), plus the seeds that found the LA-19 floor
  rule; `test_soak_long_faults` (`-m soak`) runs 10,000 of them
  (`python -m tests.sim.run --seeds A..B --long-faults`).
* `test_owner_lost_before_first_checkpoint_converges`: the bootstrap window the random
  scenarios skip (their faults start once v1 is checkpointed): recovery to the initial state.

A failure message starts with `seed=<n>` and the command that replays that seed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim import ahead as sim_ahead
from tests.sim import events
from tests.sim.ahead import SeedsAhead
from tests.sim.events import NODES_MAX, NODES_MIN
from tests.sim.parallel import SeedOutcome, outcomes, summarize
from tests.sim.simulation import LONG_FAULTS, SimConfig, Simulation, run_seed, run_simulation

FAST_SEEDS = int(os.environ.get("LAMINAR_SIM_FAST_SEEDS", "2000"))
LONG_SEEDS = int(os.environ.get("LAMINAR_SIM_LONG_SEEDS", "50"))
LONG_SOAK_SEEDS = 10_000
# Long-shape seeds that ended with every recovery refused for good (a run of Aborts whose pin
# had been compacted away) before the decision floor kept the pin's decision (LA-19).
LONG_REGRESSIONS = (574, 742, 798, 988, 1098)
SOAK_SEEDS = 100_000
REPLAY_SEED = 11
BOOT_WINDOW_SEED = 3
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ahead() -> Iterator[SeedsAhead]:
    """The pool `tests/conftest.py` started when collection ended (or one started now)."""
    results = sim_ahead.running() or sim_ahead.start(range(FAST_SEEDS))
    try:
        yield results
    finally:
        sim_ahead.stop()


@pytest.mark.parametrize("seed", range(FAST_SEEDS))
def test_seed(seed: int, ahead: SeedsAhead) -> None:
    result = ahead.get(seed)
    if result.violations:
        raise AssertionError(result.message)  # starts with "seed=<n>" and the replay command
    figures = result.figures
    replay = f"seed={seed}: replay with `python -m tests.sim.run --seed {seed}`"
    for what in ("crashes", "joins", "leaves", "faults"):
        assert figures.get(what, 0) >= 1, f"{replay}: the run had no {what}: {figures}"
    assert NODES_MIN <= figures["members_first"] < NODES_MAX, f"{replay}: {figures}"
    assert figures["members_max"] <= NODES_MAX, f"{replay}: {figures}"


def test_seeds_ahead_run_at_idle_priority() -> None:
    """The background runs must never take a core from a timing-sensitive process test."""
    probe = "import os; from tests.sim.ahead import idle_priority; idle_priority(); "
    probe += "print(os.sched_getscheduler(0), os.nice(0))"
    shown = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    policy, niceness = map(int, shown.stdout.split())
    assert policy == os.SCHED_IDLE or niceness == 19, shown.stdout


def test_every_schedule_has_every_required_event() -> None:
    config = SimConfig()
    seeds = [*range(FAST_SEEDS), *range(FAST_SEEDS, SOAK_SEEDS, 10)]  # every 10th soak seed
    for seed in seeds:
        schedule = events.draw_schedule(seed, config)
        required = sorted(p.kind for p in schedule if p.required)
        assert required == sorted(events.REQUIRED), f"seed={seed}: {schedule}"
        assert all(0 <= p.at_s < config.fault_phase_s for p in schedule), f"seed={seed}"
        assert schedule == sorted(schedule), f"seed={seed}: not in time order"
    assert events.draw_schedule(7, SimConfig(faults=False)) == []


def test_same_seed_same_trace() -> None:
    first = run_seed(REPLAY_SEED)
    second = run_seed(REPLAY_SEED)
    assert first.trace == second.trace
    assert first.digest == second.digest
    assert first.figures == second.figures
    replay = subprocess.run(
        [sys.executable, "-m", "tests.sim.run", "--seed", str(REPLAY_SEED)],
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = replay.stdout.splitlines()
    assert f"digest {first.digest}" in lines, replay.stdout[-2000:] + replay.stderr[-2000:]
    assert lines[: len(first.trace)] == first.trace


@pytest.mark.parametrize("seed", [*LONG_REGRESSIONS, *range(LONG_SEEDS)])
def test_long_fault_phase_seed(seed: int) -> None:
    result = run_seed(seed, LONG_FAULTS)
    assert not result.violations, result.failure_message()
    assert result.figures["crashes"] >= 1 and result.figures["leaves"] >= 1


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_soak_long_faults() -> None:
    count = int(os.environ.get("LAMINAR_SIM_LONG_SOAK_SEEDS", str(LONG_SOAK_SEEDS)))
    failures = [r.message for r in outcomes(range(count), config=LONG_FAULTS) if r.violations]
    assert not failures, f"{len(failures)} of {count} seeds failed; first:\n" + "\n\n".join(
        failures[:5]
    )


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_soak() -> None:
    start = int(os.environ.get("LAMINAR_SIM_START", "0"))
    count = int(os.environ.get("LAMINAR_SIM_SEEDS", str(SOAK_SEEDS)))
    failures: list[str] = []
    results: list[SeedOutcome] = []
    for result in outcomes(range(start, start + count)):
        results.append(result)
        if result.violations:
            failures.append(result.message)
    total = summarize(results)
    print(" ".join(f"{k}={v}" for k, v in sorted(total.items())))
    assert not failures, f"{len(failures)} of {count} seeds failed; first:\n" + "\n\n".join(
        failures[:5]
    )


class _OwnerLostBeforeFirstCheckpoint(Simulation):
    """The bootstrap window the scenarios skip: an owner of v1 crashes (and restarts as a new
    boot) after v1 is committed but before any cluster checkpoint commits under v1's fence."""

    async def _bootstrap(self) -> bool:
        while not self.checkers.committed:
            await self._step(until=self.clock.monotonic() + 0.05)
        assert self.checkers.last_commit_fence is None, "a checkpoint already committed"
        owner = self.checkers.committed[1].owners[0]
        assert await self.kill(owner, after_turns=0)
        self.note(f"node {owner} crashed before the first checkpoint; restart in 0.5 s")
        self.restart_later(owner, 0.5)
        return True


def test_owner_lost_before_first_checkpoint_converges() -> None:
    """No cluster checkpoint has committed yet, so recovery restores the initial state."""
    simulation = _OwnerLostBeforeFirstCheckpoint(BOOT_WINDOW_SEED, SimConfig(faults=False))
    result = run_simulation(simulation)
    if result.violations:
        raise AssertionError(result.failure_message())
