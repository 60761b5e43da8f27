"""Membership with real node processes on one file:// store (docs/protocols/membership.md
ML-2, ML-4, ML-7, ML-9; ML §1.3).

Three nodes start and see each other; SIGKILL of one is seen as dead by the others within the
ttl plus one poll (plus scheduling slack); a restart takes the next term; a duplicate start of
a node id fences the older process, which exits 3 naming the newer term; SIGTERM makes a node
announce draining, then left, and exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

TTL_S = 1.0
RENEW_S = 0.2
POLL_S = 0.2
SLACK_S = 0.5  # process scheduling and file I/O on a loaded test machine
WAIT_S = 15.0


class Node:
    def __init__(self, url: str, node: int, log: Path) -> None:
        self.node, self.log = node, log
        command = [sys.executable, "-m", "laminar_cluster.harness.membership_node"]
        command += ["--store", url, "--node-id", str(node), "--log", str(log)]
        command += ["--ttl", str(TTL_S), "--renew", str(RENEW_S), "--poll", str(POLL_S)]
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )

    def lines(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for raw in self.log.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                continue  # a line being written
        return out

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = next((line for line in self.lines() if predicate(line)), None)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"node {self.node}: no matching log line in {WAIT_S} s")


def _state_of(line: dict[str, Any], node: int) -> tuple[str, int] | None:
    if line["event"] != "view":
        return None
    member = next((m for m in line["members"] if m["node"] == node), None)
    return None if member is None else (member["state"], member["term"])


def _sees(node: int, state: str, term: int, after: float = 0.0) -> Callable[[dict[str, Any]], bool]:
    return lambda line: line["t_mono"] >= after and _state_of(line, node) == (state, term)


@contextmanager
def _cluster() -> Iterator[list[Node]]:
    nodes: list[Node] = []
    try:
        yield nodes
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.process.kill()
            node.process.wait(timeout=10)
            if node.process.stderr is not None:
                node.process.stderr.close()


@pytest.mark.processes
def test_membership_kill_restart_duplicate_and_leave(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}?fsync=false"
    with _cluster() as nodes:
        for node in (1, 2, 3):
            nodes.append(Node(url, node, tmp_path / f"node{node}.log"))
        one, two, three = nodes
        for observer in nodes:  # ML-9: every node sees all three, itself included
            observer.wait_for(
                lambda line: (
                    line["event"] == "view"
                    and [(m["node"], m["state"]) for m in line["members"]]
                    == [(1, "active"), (2, "active"), (3, "active")]
                )
            )

        three.process.send_signal(signal.SIGKILL)
        killed_s = time.monotonic()
        three.process.wait(timeout=10)
        for observer in (one, two):  # ML-4: dead within ttl + one poll of the kill
            dead = observer.wait_for(_sees(3, "dead", 1))
            elapsed_s = dead["t_mono"] - killed_s
            # Lower bound: never before a ttl after the last renewal, which preceded the kill
            # by at most one renew interval (plus slack for a slow last renewal).
            assert TTL_S - RENEW_S - SLACK_S <= elapsed_s <= TTL_S + POLL_S + SLACK_S, elapsed_s

        restarted = Node(url, 3, tmp_path / "node3b.log")
        nodes.append(restarted)
        acquired = restarted.wait_for(lambda line: line["event"] == "acquired")
        assert (acquired["term"], acquired["predecessor_term"]) == (2, 1)
        one.wait_for(_sees(3, "active", 2))

        duplicate = Node(url, 2, tmp_path / "node2b.log")  # ML-2: the older one is fenced
        nodes.append(duplicate)
        assert duplicate.wait_for(lambda line: line["event"] == "acquired")["term"] == 2
        assert two.process.wait(timeout=10) == 3
        assert two.process.stderr is not None
        message = two.process.stderr.read()
        assert "FENCED" in message and "superseded by term 2" in message, message
        one.wait_for(_sees(2, "active", 2))

        one.process.send_signal(signal.SIGTERM)  # ML-7: draining, then left, then exit 0
        assert one.process.wait(timeout=10) == 0
        events = [line["event"] for line in one.lines()]
        assert events.index("leaving") < events.index("draining") < events.index("left")
        restarted.wait_for(_sees(1, "left", 1))
