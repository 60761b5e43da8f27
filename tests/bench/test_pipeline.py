"""`laminar-cluster bench pipeline --json`, run as a user runs it (the installed console script
in a subprocess) on a small workload: every figure is there and has its type, each run's
committed output passed the exactly-once check, and the human-readable form prints. Never a
timing assertion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.bench.pipeline import print_pipeline

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")
RUN_KEYS = {
    "nodes",
    "events",
    "produce_s",
    "start_to_processing_s",
    "process_s",
    "events_per_s",
    "seeded_nodes",
    "rotations",
    "checkpoints",
    "store_requests_per_checkpoint",
    "all_requests_per_checkpoint",
    "exactly_once",
}
CHECKPOINT_KEYS = {"committed", "failed", "duration_p50_s", "duration_p99_s"}
RECOVERY_KEYS = {
    "killed_node",
    "leader",
    "recovery_s",
    "recovery_fence_version",
    "seen_dead_s",
    "recovery_rotated_s",
    "all_running_s",
    "events_after_kill",
}


@pytest.mark.processes
@pytest.mark.soak  # minutes of real processes: outside make test's budget
def test_bench_pipeline_json_figures(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "pipeline", "--json", "--events", "40000", "--partitions", "8"]
    args += ["--keys", "300", "--nodes", "1,2"]
    result = subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures: dict[str, Any] = json.loads(result.stdout)
    assert figures["workload"]["events"] == 40_000
    assert [run["nodes"] for run in figures["runs"]] == [1, 2]
    for run in figures["runs"]:
        assert set(run) >= RUN_KEYS, run
        assert set(run["checkpoints"]) == CHECKPOINT_KEYS
        assert run["checkpoints"]["committed"] >= 1
        assert run["events_per_s"] > 0
        assert run["exactly_once"] is True, run
    recovery = figures["recovery"]
    assert set(recovery) == RECOVERY_KEYS
    assert recovery["recovery_s"] > 0
    assert isinstance(figures["meets_target"], bool)

    print_pipeline(figures, as_json=False)
    text = capsys.readouterr().out
    assert "1 node(s):" in text and "2 node(s):" in text and "recovery:" in text
