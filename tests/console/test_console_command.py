"""`laminar-cluster console` (cli/console.py): one line naming the URL once it listens, exit 0
on SIGTERM; an address in use is a one-line error and exit 2."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path


def _console(store: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "laminar_cluster.cli", "console", "--store", f"file://{store}"]
    return subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    console = _console(tmp_path, "--port", "0")
    assert console.stdout is not None
    line = console.stdout.readline()
    assert line.startswith(f"console for file://{tmp_path} at http://127.0.0.1:"), line
    console.send_signal(signal.SIGTERM)
    assert console.wait(timeout=10) == 0


def test_an_address_in_use_is_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        console = _console(tmp_path, "--port", str(port))
        out, err = console.communicate(timeout=30)
    assert console.returncode == 2 and out == ""
    assert f"console endpoint 127.0.0.1:{port}: cannot listen" in " ".join(err.split())
