"""Run simulation seeds from the command line.

    python -m tests.sim.run --seed 17            # one seed: its full event trace and figures
    python -m tests.sim.run --seeds 0..99999     # many seeds on every core: failures and totals
    python -m tests.sim.run --seeds 0..999 --jobs 1 --progress 100
    python -m tests.sim.run --seeds 0..9999 --long-faults   # the long scenario shape

A failing seed prints its failure message (it starts with `seed=<n>`); `--seed <n>` replays it
exactly. The exit status is 1 when any seed failed.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.sim.parallel import SeedOutcome, default_jobs, outcomes, summarize
from tests.sim.simulation import LONG_FAULTS, run_seed


def parse_range(text: str) -> range:
    """`A..B` (inclusive) or a single number."""
    first, _, last = text.partition("..")
    start = int(first)
    return range(start, (int(last) if last else start) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.run")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run one seed and print its trace")
    which.add_argument("--seeds", type=parse_range, help="run seeds A..B (inclusive)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes")
    parser.add_argument(
        "--progress",
        type=int,
        default=1000,
        metavar="N",
        help="print a progress line to stderr every N runs (0: never)",
    )
    parser.add_argument(
        "--long-faults",
        action="store_true",
        help="the long scenario shape (simulation.LONG_FAULTS: a 20 s fault phase)",
    )
    args = parser.parse_args(argv)
    config = LONG_FAULTS if args.long_faults else None
    if args.seed is not None:
        result = run_seed(args.seed, config)
        print("\n".join(result.trace))
        print(f"digest {result.digest}")
        print(" ".join(f"{k}={v}" for k, v in sorted(result.figures.items())))
        if result.violations:
            print(result.failure_message())
            return 1
        print(f"seed={args.seed}: every checker passed")
        return 0
    started = time.perf_counter()
    results: list[SeedOutcome] = []
    failed = 0
    for outcome in outcomes(args.seeds, jobs=args.jobs, config=config):
        results.append(outcome)
        if outcome.violations:
            failed += 1
            print(outcome.message, flush=True)
        if args.progress and len(results) % args.progress == 0:
            elapsed = time.perf_counter() - started
            print(
                f"progress: {len(results)}/{len(args.seeds)} runs (through seed {outcome.seed}), "
                f"{failed} failed, {elapsed:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    total = summarize(results)
    elapsed = time.perf_counter() - started
    print(" ".join(f"{k}={v}" for k, v in sorted(total.items())))
    print(f"{total['runs']} runs, {total['failed_runs']} failed, {elapsed:.1f} s")
    return 1 if total["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
