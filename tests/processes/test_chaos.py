"""Chaos with real stream node processes on file:// (issue 7 "What must show"; the harness and
the soak command are in tests/processes/chaos.py): random (seeded; the seed is printed, and
LAMINAR_CHAOS_SEED replays one) SIGKILL, restart, join and graceful leave while the workload is
produced, then the exactly-once check of the committed output. The same with every node's store
behind the fault-injecting wrapper (errors before and after a write applied, latency).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.processes.chaos import ChaosConfig, chaos_seed, run_chaos

pytestmark = pytest.mark.processes


def test_chaos_kill_restart_join_leave_exactly_once(tmp_path: Path) -> None:
    """make test's round: a 25 s window (about 8 actions) over 80,000 events; the soak keeps
    60 s windows over 150,000."""
    config = ChaosConfig(seed=chaos_seed(), chaos_s=25.0, events=80_000)
    report = run_chaos(config, tmp_path)
    print(report.describe())
    assert report.passed, report.describe()


@pytest.mark.soak  # flaky within make test's budget; see the closing note of issue 7
def test_chaos_faulty_stores_exactly_once(tmp_path: Path) -> None:
    config = ChaosConfig(seed=chaos_seed(), chaos_s=30.0, fault_rate=0.01, fault_latency_ms=5.0)
    report = run_chaos(config, tmp_path)
    print(report.describe())
    assert report.passed, report.describe()


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_chaos_soak(tmp_path: Path) -> None:
    """Rounds back to back for LAMINAR_SOAK_MINUTES (default 30); alternating fault rates."""
    import time

    end = time.monotonic() + float(os.environ.get("LAMINAR_SOAK_MINUTES", "30")) * 60
    seed, rounds = chaos_seed(), 0
    while time.monotonic() < end:
        fault_rate = 0.01 if rounds % 2 else 0.0
        workdir = tmp_path / f"round-{rounds}"
        workdir.mkdir()
        config = ChaosConfig(seed=seed + rounds, chaos_s=60.0, fault_rate=fault_rate)
        report = run_chaos(config, workdir)
        print(report.describe())
        assert report.passed, report.describe()
        rounds += 1
