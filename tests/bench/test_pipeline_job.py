"""`laminar-cluster bench pipeline --job count_sum --json`, run as a user runs it (the console
script in a subprocess) on a small workload: one node process runs the reference job over the
pre-written record log, its delivered output equals the independent computation, Bytewax ran
on the same workload and was verified too, and every figure is there with its type. The
verifiers refuse a wrong output. Never a timing assertion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.bench.job_output import verify_count_sum, verify_keyed_step, verify_windowed
from laminar_cluster.bench.pipeline_job import print_pipeline_job, resolve_job
from laminar_cluster.errors import InvalidArgument

pytest.importorskip("bytewax")

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")
RUN_KEYS = {
    "nodes",
    "events",
    "start_to_processing_s",
    "process_s",
    "events_per_s",
    "checkpoints",
    "verified",
    "verification",
    "bytewax",
    "ratio",
    "ratio_wall",
}
PEER_KEYS = {"job", "events", "seconds", "events_per_s", "processing_events_per_s", "verified"}


@pytest.mark.processes
def test_bench_pipeline_job_count_sum_verified_with_its_bytewax_peer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["bench", "pipeline", "--job", "count_sum", "--json", "--events", "20000"]
    args += ["--partitions", "8", "--keys", "500"]
    result = subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures: dict[str, Any] = json.loads(result.stdout)
    assert figures["job"] == "count_sum"
    assert figures["job_path"] == "laminar_cluster.harness.reference_jobs:count_sum"
    assert figures["workload"]["events"] == 20_000
    assert figures["workload"]["record_partitions"] == 256
    [run] = figures["runs"]
    assert set(run) >= RUN_KEYS, run
    assert run["nodes"] == 1 and run["events"] == 20_000
    assert run["verified"] is True, run["verification"]
    assert run["events_per_s"] > 0 and run["checkpoints"]["committed"] >= 1
    assert set(run["bytewax"]) >= PEER_KEYS
    assert run["bytewax"]["verified"] is True and run["bytewax"]["workers"] == 1
    assert isinstance(run["ratio"], float) and isinstance(run["ratio_wall"], float)
    assert figures["target"]["met"] in (True, False)
    print_pipeline_job(figures, as_json=False)
    assert "ratio" in capsys.readouterr().out


def test_verifiers_refuse_a_wrong_output() -> None:
    expected = {1: (2, 10), 2: (1, -3)}
    right = [{"key": 1, "count": 1, "sum": 4}, {"key": 2, "count": 1, "sum": -3}]
    right.append({"key": 1, "count": 2, "sum": 10})  # the newest record of a key counts
    assert verify_count_sum(expected, right)[0]
    assert not verify_count_sum(expected, right[:2])[0]
    windows = {(1, 0): 2, (1, 1): 1}
    closed = [
        {"key": 1, "window_start_ms": 0, "window_end_ms": 60_000, "count": 2},
        {"key": 1, "window_start_ms": 60_000, "window_end_ms": 120_000, "count": 1},
    ]
    assert verify_windowed(windows, closed, late=0)[0]
    assert not verify_windowed(windows, closed, late=1)[0]
    assert not verify_windowed(windows, [*closed, closed[0]], late=0)[0]  # emitted twice
    steps = {7: [(50, 3), (100, -1)]}
    records = [{"key": 7, "count": 50, "last": 3}, {"key": 7, "count": 100, "last": -1}]
    assert verify_keyed_step(steps, records)[0]
    assert not verify_keyed_step(steps, records[::-1])[0]


def test_a_job_path_that_names_no_job_is_refused_before_anything_runs() -> None:
    assert resolve_job("windowed").reference == "windowed"
    with pytest.raises(InvalidArgument, match="module:attribute"):
        resolve_job("no_such_reference")
    with pytest.raises(InvalidArgument, match="does not import"):
        resolve_job("no_such_module_xyz:job")
