"""Running many seeds on every core: a pool of spawned worker processes, results in seed order.

Each run is independent and a pure function of its seed (see `tests.sim.simulation`), so the
worker a seed lands on does not matter: a seed replays identically in any process.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tests.sim.simulation import SimConfig, run_seed


@dataclass(frozen=True)
class SeedOutcome:
    seed: int
    violations: tuple[str, ...]
    message: str  # the full failure message ("" when the run passed)
    figures: dict[str, int]
    digest: str
    seconds: float  # wall
    cpu_seconds: float  # this process's CPU time: what the run costs on an idle machine


def outcome_of(seed: int, config: SimConfig | None = None) -> SeedOutcome:
    started, cpu_started = time.perf_counter(), time.process_time()
    result = run_seed(seed, config)
    message = result.failure_message() if result.violations else ""
    return SeedOutcome(
        seed=seed,
        violations=tuple(result.violations),
        message=message,
        figures=dict(result.figures),
        digest=result.digest,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def outcomes(
    seeds: Iterable[int], *, jobs: int | None = None, config: SimConfig | None = None
) -> Iterator[SeedOutcome]:
    """Run `seeds` on `jobs` worker processes (default: every usable core), in seed order."""
    ordered = list(seeds)
    workers = default_jobs() if jobs is None else jobs
    if workers <= 1 or len(ordered) <= 1:
        for seed in ordered:
            yield outcome_of(seed, config)
        return
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        yield from pool.imap(outcome_task, [(seed, config) for seed in ordered], chunksize=4)


def outcome_task(job: tuple[int, SimConfig | None]) -> SeedOutcome:
    """`outcome_of` as a pool task."""
    return outcome_of(*job)


def summarize(results: Iterable[SeedOutcome]) -> Counter[str]:
    """Sum the figures of many runs, plus runs, failures and seconds."""
    total: Counter[str] = Counter()
    for result in results:
        total.update(result.figures)
        total["runs"] += 1
        total["failed_runs"] += bool(result.violations)
        total["run_ms"] += round(result.seconds * 1000)
        total["run_cpu_ms"] += round(result.cpu_seconds * 1000)
    return total
