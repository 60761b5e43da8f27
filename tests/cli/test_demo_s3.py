"""`laminar-cluster demo --store s3://...` (issue 7) against the moto S3 test server, run as a
user runs it: the console script in a subprocess, four node processes on one bucket."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.s3server import SECRET_KEY

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")
EVENTS = 20_000
# moto serves one request at a time (tests/support/moto_serial.py), and a checkpoint writes and
# verifies one partial per vnode: 16 vnodes keep a checkpoint to a few dozen requests.
VNODES = 16
TIMEOUT_S = 280


@pytest.mark.s3
@pytest.mark.processes
def test_demo_counts_every_event_exactly_once_on_s3(s3_url: str) -> None:
    """3 nodes, a join, the leader SIGKILLed, a graceful leave; every event committed once."""
    args = ["--events", str(EVENTS), "--partitions", "8", "--keys", "1000"]
    result = subprocess.run(
        [COMMAND, "demo", "--store", s3_url, *args, "--vnodes", str(VNODES), "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    figures = json.loads(result.stdout) if result.stdout.startswith("{") else {}
    error = str(figures.get("error", ""))[:3000]
    assert result.returncode == 0, error or result.stdout[-3000:] + result.stderr[-3000:]
    assert figures["store"].startswith("s3://")
    assert "secret_access_key=***" in figures["store"]  # issue 17: the secret never printed
    assert f"secret_access_key={SECRET_KEY}" not in result.stdout + result.stderr
    assert figures["scratch"]["kept"] is False
    assert not Path(figures["scratch"]["path"]).exists()
    assert figures["vnodes"] == VNODES
    assert figures["store_contract"]["ok"] is True
    check = figures["check"]
    assert check["passed"] is True
    assert check["committed_events"] == check["expected_events"] == EVENTS
    assert check["lost"] == check["duplicated"] == check["wrong_keys"] == 0
    assert figures["checkpoints"]["committed"] >= 1
    assert figures["rotations"] >= 3  # the join, the recovery, the leave
    assert figures["leader_kill"]["recovery_s"] > 0
    assert figures["leave"]["left_s"] > 0
