"""`laminar-cluster bench rebalance --json` and `laminar-cluster node`, run as a user runs them
(the installed console script in a subprocess). The bench's figures are checked for shape and
for the placement facts (moved = rendezvous minimum, the leaver exits 0), never for timing."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.bench.rebalance import print_figures

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")

ROTATION_KEYS = {
    "from_version",
    "to_version",
    "generations",
    "leader",
    "change_seen_by",
    "vnodes_moved",
    "rendezvous_minimum",
    "moved_equals_minimum",
    "seen_to_running_s",
    "excluding_debounce_s",
    "attempt_to_running_s",
    "leader_attempt_s",
    "commit_to_running_s",
    "failed_attempts",
    "leader_attempt_requests",
    "watcher_requests_excess_estimate",
    "store_requests_per_rotation",
}


def run(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


@pytest.mark.processes
def test_bench_rebalance_json_figures(tmp_path: Path) -> None:
    result = run("bench", "rebalance", "--json", "--store", f"file://{tmp_path}/store")
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout)
    assert figures["nodes_run_as"].startswith("real processes")
    assert figures["vnode_count"] == 256
    assert "PurposeCountingStore" in figures["requests_method"]
    assert isinstance(figures["meets_target"], bool)
    join, leave = figures["join"], figures["leave"]
    assert set(join) == ROTATION_KEYS
    assert set(leave) == ROTATION_KEYS | {"leaver", "leaver_exit_code"}
    for rotation in (join, leave):
        assert rotation["generations"] == rotation["to_version"] - rotation["from_version"] >= 1
        assert rotation["vnodes_moved"] == rotation["rendezvous_minimum"] > 0
        assert rotation["moved_equals_minimum"] is True
        assert rotation["leader_attempt_requests"] > 0
        assert rotation["seen_to_running_s"] >= rotation["attempt_to_running_s"] > 0
    assert leave["leaver_exit_code"] == 0
    assert sorted((tmp_path / "store").iterdir()) == []  # the bench's namespace is removed


def test_bench_rebalance_table_prints_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    rotation = dict.fromkeys(sorted(ROTATION_KEYS), 7)
    print_figures({"store": "file:///x", "join": rotation, "target_s": 1.0}, as_json=False)
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["store", "file:///x"]
    assert "join:" in out and all(key in out for key in ROTATION_KEYS)


def test_bench_rebalance_refuses_memory() -> None:
    result = run("bench", "rebalance", "--store", "memory://", timeout_s=60)
    assert result.returncode == 2
    assert "node processes need a shared store" in " ".join(result.stderr.split())


def test_node_refuses_a_poll_above_the_drain_ack_timeout(tmp_path: Path) -> None:
    result = run(
        *("node", "--store", f"file://{tmp_path}/store", "--node-id", "1"),
        *("--poll", "20"),
        timeout_s=60,
    )
    assert result.returncode == 2
    assert "must exceed watcher_poll_s (10.0 <= 20.0)" in " ".join(result.stderr.split())


def test_node_stops_on_a_second_signal_without_leaving(tmp_path: Path) -> None:
    """One node alone (it seeds v1 with itself): SIGTERM starts a graceful leave that cannot
    finish (it owns every vnode and nobody can take them), a second SIGTERM stops it at once:
    exit 1, no `left`."""
    process = subprocess.Popen(
        [
            *(COMMAND, "node", "--store", f"file://{tmp_path}/store?fsync=false", "--node-id"),
            *("1", "--ttl", "2", "--poll", "0.2", "--debounce", "0.2"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not any(e["event"] == "activated" for e in seen):
            assert time.monotonic() < deadline, seen
            line = process.stderr.readline()
            if line.startswith("{"):
                seen.append(json.loads(line))
        process.send_signal(signal.SIGTERM)
        while not any(e["event"] == "draining" for e in seen):
            assert time.monotonic() < deadline, seen
            line = process.stderr.readline()
            if line.startswith("{"):
                seen.append(json.loads(line))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 1
        rest = [json.loads(line) for line in process.stderr.read().splitlines() if line]
        events = [e["event"] for e in seen + rest]
        assert "left" not in events
        assert events[-1] == "stopped" and (seen + rest)[-1]["exit_code"] == 1
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
