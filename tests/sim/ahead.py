"""The fast seeds' runs, started when the test session's collection ends and computed in the
background at idle CPU priority while the rest of the suite runs.

`make test` runs 2,000 seeds. Run after the other tests, they would add their whole CPU time
to the suite's wall time; the process tests mostly wait on timers and leave cores idle. The
workers run under `SCHED_IDLE` (else at nice 19): the kernel gives them a core only when no
other task wants it, so the timing-sensitive process tests never wait for a simulation run.
Each `test_seed` then asserts the result of its own seed, waiting for it if it is not ready.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence

from tests.sim.parallel import SeedOutcome, default_jobs, outcome_task


def idle_priority() -> None:
    """Lower this process to the idle scheduling class (Linux), else to nice 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


class SeedsAhead:
    """Results of `seeds`, computed in seed order on a pool of idle-priority workers and
    handed out once each."""

    def __init__(self, seeds: Sequence[int], jobs: int | None = None) -> None:
        self.seeds = frozenset(seeds)
        context = multiprocessing.get_context("spawn")
        self._pool = context.Pool(jobs or default_jobs(), initializer=idle_priority)
        tasks = [(seed, None) for seed in sorted(self.seeds)]
        self._iterator: Iterator[SeedOutcome] = self._pool.imap(outcome_task, tasks, chunksize=2)
        self._done: dict[int, SeedOutcome] = {}

    def get(self, seed: int) -> SeedOutcome:
        if seed not in self.seeds:
            raise KeyError(f"seed {seed} is not among the seeds computed ahead")
        while seed not in self._done:
            result = next(self._iterator)
            self._done[result.seed] = result
        return self._done.pop(seed)

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()


_session: SeedsAhead | None = None


def start(seeds: Sequence[int]) -> SeedsAhead:
    """Start computing `seeds` now (once a session; later calls return the running pool)."""
    global _session
    if _session is None:
        _session = SeedsAhead(seeds)
    return _session


def running() -> SeedsAhead | None:
    return _session


def stop() -> None:
    global _session
    if _session is not None:
        _session.close()
        _session = None
