"""Leader-election contender processes (`harness.contender`) on one store, one per node id, with
their JSON-lines logs read incrementally: the failover bench and the election torture test."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from laminar_cluster.harness.contender import EXIT_STORE_REFUSED
from laminar_cluster.store.probe import StoreContractViolated

_BELIEF_EVENTS: Final = frozenset({"granted", "renewed", "ended"})


class ContenderFleet:
    """Contender processes on one store, one per node id, with their logs read incrementally.

    Used by the failover bench and the election torture test. Logs live in `log_dir`, one
    file per node (appended across restarts); `events[node]` holds what was read so far.
    """

    def __init__(
        self,
        store_url: str,
        log_dir: Path,
        *,
        ttl_s: float,
        renew_interval_s: float,
        decisions: bool,
        stop_after_s: float,
        decision_think_s: float = 0.0,
    ) -> None:
        self.store_url = store_url
        self.decision_think_s = decision_think_s
        self.log_dir = log_dir
        self.ttl_s = ttl_s
        self.renew_interval_s = renew_interval_s
        self.decisions = decisions
        self.stop_after_s = stop_after_s
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.exit_codes: dict[int, list[int]] = {}
        self._offsets: dict[int, int] = {}

    def log_path(self, node: int) -> Path:
        return self.log_dir / f"node-{node}.log"

    def start(self, node: int) -> None:
        assert node not in self.processes or self.processes[node].poll() is not None
        command = [sys.executable, "-m", "laminar_cluster.harness.contender"]
        command += ["--store", self.store_url, "--node", str(node), "--ttl", str(self.ttl_s)]
        command += ["--renew", str(self.renew_interval_s), "--log", str(self.log_path(node))]
        command += ["--stop-after", str(self.stop_after_s)]
        if self.decisions:
            command += ["--decisions", "--think", str(self.decision_think_s)]
        with open(self.log_dir / f"node-{node}.stderr", "ab") as stderr:
            self.processes[node] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )

    def alive(self, node: int) -> bool:
        process = self.processes.get(node)
        return process is not None and process.poll() is None

    def send(self, node: int, signum: signal.Signals) -> None:
        process = self.processes[node]
        if process.poll() is None:
            process.send_signal(signum)

    def kill(self, node: int) -> None:
        """SIGKILL the node's process (stopped or not) and reap it."""
        process = self.processes[node]
        if process.poll() is None:
            process.kill()
        self.exit_codes.setdefault(node, []).append(process.wait())

    def close(self, timeout_s: float = 15.0) -> dict[int, int]:
        """Continue and SIGTERM every live process, wait, SIGKILL stragglers; the exit codes of
        the processes stopped here."""
        stopping = [node for node in self.processes if self.alive(node)]
        for node in stopping:
            self.send(node, signal.SIGCONT)
            self.send(node, signal.SIGTERM)
        codes: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        for node in stopping:
            process = self.processes[node]
            try:
                codes[node] = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                codes[node] = process.wait()
            self.exit_codes.setdefault(node, []).append(codes[node])
        self.refresh()
        return codes

    def __enter__(self) -> ContenderFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def refresh(self) -> None:
        """Read the complete lines appended to every log since the last call."""
        for node in self.processes:
            path = self.log_path(node)
            if not path.exists():
                continue
            with open(path, "rb") as file:
                file.seek(self._offsets.get(node, 0))
                chunk = file.read()
            complete = chunk.rfind(b"\n") + 1
            self._offsets[node] = self._offsets.get(node, 0) + complete
            lines = chunk[:complete].decode().splitlines()
            self.events.setdefault(node, []).extend(json.loads(line) for line in lines if line)

    def current_run(self, node: int) -> list[dict[str, Any]]:
        """The events of the node's latest process start (from its `start` event on)."""
        events = self.events.get(node, [])
        for index in range(len(events) - 1, -1, -1):
            if events[index]["event"] == "start":
                return events[index:]
        return []

    def require_running(self, nodes: tuple[int, ...]) -> None:
        """Fail at once if a contender exited by itself: exit 2 is a refused store (LA-12)."""
        for node in nodes:
            process = self.processes.get(node)
            code = None if process is None else process.poll()
            if code is None:
                continue
            refused = [e for e in self.events.get(node, []) if e["event"] == "refused"]
            if code == EXIT_STORE_REFUSED:
                reason = refused[-1]["reason"] if refused else "see its stderr"
                raise StoreContractViolated(f"contender {node} refused the store: {reason}")
            raise RuntimeError(f"contender {node} exited with {code}; see {self.log_dir}")

    def believer(self, now: float) -> tuple[int, int] | None:
        """(node, token) of a live process whose latest belief is live at `now`, if any."""
        for node in self.processes:
            if not self.alive(node):
                continue
            beliefs = [e for e in self.current_run(node) if e["event"] in _BELIEF_EVENTS]
            if beliefs and beliefs[-1]["event"] != "ended" and beliefs[-1]["until"] > now:
                return node, int(beliefs[-1]["token"])
        return None
