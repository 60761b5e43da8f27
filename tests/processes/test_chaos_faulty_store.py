"""Exactly once with every node's store behind the fault-injecting wrapper (issue 7 "What must
show": errors before and after a write applied, and latency), bounded to fit `make test`.

Real `laminar-cluster node` processes on one file:// store, each with its own seeded
`FaultyStore` (`--fault-rate/--fault-seed/--fault-latency-ms`: 1% of requests fail before they
apply, 1% of writes apply and lose their response, up to 5 ms latency on every request), under
the seeded chaos of `tests/processes/chaos.py` (SIGKILL, restart, join, graceful leave) while
the workload is produced; then every event must be committed exactly once. A node may not
crash or exit on its own except by fencing itself (exit 3).

The seed is random and printed; LAMINAR_CHAOS_SEED replays one. The longer form (more events,
a longer window, many seeds) is `python -m tests.processes.chaos --fault-rate 0.01
--fault-latency-ms 5 --minutes M`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes.chaos import ChaosConfig, chaos_seed, run_chaos

pytestmark = pytest.mark.processes

FAULT_RATE = 0.01
FAULT_LATENCY_MS = 5.0


@pytest.mark.timeout(240)
def test_chaos_faulty_stores_exactly_once_bounded(tmp_path: Path) -> None:
    config = ChaosConfig(
        seed=chaos_seed(),
        chaos_s=20.0,
        events=60_000,
        keys=1_000,
        fault_rate=FAULT_RATE,
        fault_latency_ms=FAULT_LATENCY_MS,
    )
    report = run_chaos(config, tmp_path)
    print(report.describe())
    assert report.passed, report.describe()
    assert report.check is not None and report.check.passed
