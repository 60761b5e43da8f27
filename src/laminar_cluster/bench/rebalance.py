"""`laminar-cluster bench rebalance`: one join (4 -> 5 nodes) and one graceful leave (5 -> 4) of
real `laminar-cluster node` processes on a fresh file:// store (RB §1.1, RB §3.1, RB §4.2).

The nodes are real processes on this host (one event loop each, as in production), not tasks
of one loop: their timings then include what a loaded host does to them. Their clocks are one
CLOCK_MONOTONIC, so events of different nodes compare directly (resolution: each node's monitor
looks every 20 ms). For each rotation:

* `vnodes_moved` between the committed heads before and after, and `rendezvous_minimum`: the
  vnodes that must move at all (a join: those the new node owns after; a leave: those the
  leaver owned before). Rendezvous placement moves exactly those.
* `generations`: committed versions between the heads (1 unless a rotation failed or took the
  recovery path on a loaded host).
* `seen_to_running_s`: from the leader's `members` event showing the change (the joiner
  `active`, the leaver `draining`) to the last node's `adopted` event of the new version;
  `excluding_debounce_s` subtracts the debounce (the loop waits it by design);
  `attempt_to_running_s` is from the start of the leader's successful `try_rebalance`;
  `failed_attempts` counts the leader's attempts that failed in between (each costs a
  `retry_delay`).
* Store requests: every node counts its requests by purpose (`rebalance.node.stats`). The
  leader's rotation attempt is counted exactly (`leader_attempt_requests`). The watchers' extra
  requests during the rotation are an estimate: their counts over the rotation window minus
  each node's steady watcher rate measured over a quiet window before it.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import moved_vnodes, rendezvous_assignment
from laminar_cluster.bench.failover import _delete_namespace, _remove_file_namespace
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument
from laminar_cluster.harness.fleet import (
    Event,
    NodeFleet,
    NodeTimings,
    Run,
    committed_head,
)
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.views.output import console, print_json

VNODES: Final = 256
FIRST_NODES: Final = (1, 2, 3, 4)
JOINER: Final = 5
TIMINGS: Final = NodeTimings(
    ttl_s=2.0,
    poll_s=0.2,
    debounce_s=0.5,
    checkpoint_interval_s=1.0,
    retry_delay_s=0.5,
    drain_ack_timeout_s=5.0,
    stats_interval_s=0.05,
)
QUIET_S: Final = 2.0
STEP_TIMEOUT_S: Final = 60.0
TARGET_S: Final = 1.0
WATCHER: Final = "purpose.watcher"
NODES_AS: Final = "real processes (python -m laminar_cluster.cli node), one per node, this host"
REQUESTS_METHOD: Final = (
    "PurposeCountingStore in each node process: the leader's try_rebalance attempt exactly; the "
    "watchers' requests in the rotation window minus each node's steady watcher rate over a "
    f"{QUIET_S} s quiet window (estimate); renewal and discovery traffic excluded"
)


@dataclass
class _Bench:
    fleet: NodeFleet
    store: ObjectStore
    runner: asyncio.Runner

    def head(self) -> AssignmentSnapshot | None:
        return self.runner.run(committed_head(self.store))

    def settle(self, nodes: list[int]) -> AssignmentSnapshot:
        """Wait until the committed head is rendezvous over `nodes` with their current boots and
        every live run has adopted it."""
        found: list[AssignmentSnapshot] = []

        def settled() -> bool:
            head = self.head()
            if head is None or list(head.owners) != rendezvous_assignment(VNODES, nodes):
                return False
            boots = [(p.node_id, p.boot_incarnation) for p in head.participants]
            if boots != [(n, _boot(self.fleet, n)) for n in sorted(nodes)]:
                return False
            found[:] = [head]
            return all(
                _adopted_at(run, head.assignment_version) is not None
                for run in self.fleet.live_runs()
            )

        self.fleet.wait_until(f"rendezvous over {nodes} running", settled, STEP_TIMEOUT_S)
        return found[0]

    def quiet_rates(self) -> dict[int, float]:
        """Each live node's steady watcher requests per second over `QUIET_S`."""
        start = time.monotonic()
        time.sleep(QUIET_S)
        self.fleet.refresh()
        end = time.monotonic()
        return {
            run.node: (_count_at(run, end) - _count_at(run, start)) / (end - start)
            for run in self.fleet.live_runs()
        }

    def leader(self) -> Run:
        self.fleet.refresh()
        for run in self.fleet.live_runs():
            marks = [e for e in run.events if e["event"] in ("leader", "leader_lost")]
            if marks and marks[-1]["event"] == "leader":
                return run
        raise DeadlineExceeded("bench rebalance: no leader")

    def measure(
        self,
        before: AssignmentSnapshot,
        after: AssignmentSnapshot,
        changed: tuple[int, str, float],
        runs: list[Run],
        rates: dict[int, float],
    ) -> dict[str, Any]:
        """The figures of one rotation from `before` to `after`; `changed` is (node, the state
        the leader must see, when the change was triggered)."""
        version = after.assignment_version
        leader, rotated = _rotation(self.fleet, version)
        node, state, triggered = changed
        seen = _seen(leader, node, state, triggered)
        seen_by = leader.node
        if seen is None:  # leadership moved meanwhile: the first node that saw it
            sightings = [(e, run.node) for run in runs if (e := _seen(run, node, state, triggered))]
            if not sightings:
                raise DeadlineExceeded(f"bench rebalance: no node saw node {node} {state}")
            seen, seen_by = min(sightings, key=lambda sighting: float(sighting[0]["t_mono"]))
        running = max(_adopted_at(run, version) or float("inf") for run in runs)
        failed = [
            e
            for e in leader.events
            if e["event"] == "rebalance_failed" and seen["t_mono"] <= e["t_mono"] <= running
        ]
        moved = len(moved_vnodes(before.owners, after.owners))
        must = before.owners if state == "draining" else after.owners
        minimum = sum(1 for owner in must if owner == node)
        window_s = running - rotated["attempt_started"]
        default_rate = sum(rates.values()) / max(1, len(rates))
        watcher_excess = sum(
            _count_at(run, running)
            - _count_at(run, rotated["attempt_started"])
            - rates.get(run.node, default_rate) * window_s
            for run in runs
        )
        seen_to_running = running - seen["t_mono"]
        return {
            "from_version": before.assignment_version,
            "to_version": version,
            "generations": version - before.assignment_version,
            "leader": leader.node,
            "change_seen_by": seen_by,
            "vnodes_moved": moved,
            "rendezvous_minimum": minimum,
            "moved_equals_minimum": moved == minimum,
            "seen_to_running_s": round(seen_to_running, 4),
            "excluding_debounce_s": round(seen_to_running - TIMINGS.debounce_s, 4),
            "attempt_to_running_s": round(running - rotated["attempt_started"], 4),
            "leader_attempt_s": rotated["attempt_s"],
            "commit_to_running_s": round(running - rotated["t_mono"], 4),
            "failed_attempts": len(failed),
            "leader_attempt_requests": rotated["requests"],
            "watcher_requests_excess_estimate": round(watcher_excess),
            "store_requests_per_rotation": rotated["requests"] + round(watcher_excess),
        }


def _fresh_namespace(url: str) -> str:
    """`url` with a fresh path segment appended: a new, empty namespace of a shared store."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() == "memory":
        raise InvalidArgument(
            f"{url}: memory:// lives in one process; node processes need a shared store"
        )
    path = f"{parsed.path.rstrip('/')}/bench-rebalance-{uuid.uuid4().hex[:12]}"
    return urllib.parse.urlunsplit(parsed._replace(path=path))


def _boot(fleet: NodeFleet, node: int) -> str | None:
    run = fleet.current(node)
    return None if run is None else run.boot


def _adopted_at(run: Run, version: int) -> float | None:
    event = run.first(lambda e: e["event"] == "adopted" and e["version"] >= version)
    return None if event is None else float(event["t_mono"])


def _count_at(run: Run, at: float) -> int:
    """The node's watcher request count as last logged at or before `at` (0 before any)."""
    count = 0
    for event in run.events:
        if event["event"] != "requests" or event["t_mono"] > at:
            continue
        count = int(event.get(WATCHER, 0))
    return count


def _seen(run: Run, node: int, state: str, triggered: float) -> Event | None:
    """The run's first `members` event after `triggered` that shows `node` in `state`."""
    return run.first(lambda e: e["t_mono"] >= triggered and _shows(e, node, state))


def _shows(event: Event, node: int, state: str) -> bool:
    if event["event"] != "members":
        return False
    return {"node": node, "state": state} in event["members"]


def _rotation(fleet: NodeFleet, version: int) -> tuple[Run, Event]:
    for run in fleet.runs:
        rotated = run.first(lambda e: e["event"] == "rotated" and e["version"] == version)
        if rotated is not None:
            return run, rotated
    raise DeadlineExceeded(f"bench rebalance: no node logged rotating to {version}")


def _scenarios(bench: _Bench) -> dict[str, Any]:
    fleet = bench.fleet
    for node in FIRST_NODES:
        fleet.start(node)
    four = bench.settle(list(FIRST_NODES))
    rates = bench.quiet_rates()
    triggered = time.monotonic()
    fleet.start(JOINER)
    five_nodes = [*FIRST_NODES, JOINER]
    five = bench.settle(five_nodes)
    join = bench.measure(four, five, (JOINER, "active", triggered), fleet.live_runs(), rates)

    rates = bench.quiet_rates()
    leader = bench.leader().node
    leaver = max(node for node in FIRST_NODES if node != leader)
    runs = fleet.live_runs()
    triggered = time.monotonic()
    leaving = fleet.signal(leaver, signal.SIGTERM)
    leaving.process.wait(timeout=STEP_TIMEOUT_S)
    after = bench.settle([node for node in five_nodes if node != leaver])
    leave = bench.measure(five, after, (leaver, "draining", triggered), runs, rates)
    leave["leaver"] = leaver
    leave["leaver_exit_code"] = leaving.process.returncode
    return {"join": join, "leave": leave}


def run_bench_rebalance(url: str | None = None, *, keep_logs: str | None = None) -> dict[str, Any]:
    """Run both rotations on a fresh namespace of `url` (default: a temporary file:// store);
    return the figures (JSON-ready). The namespace and logs are removed unless `keep_logs`
    names a directory for the logs."""
    with (
        tempfile.TemporaryDirectory(prefix="laminar-bench-rebalance-") as scratch,
        asyncio.Runner() as runner,
    ):
        namespace = f"file://{scratch}/store" if url is None else _fresh_namespace(url)
        log_dir = Path(keep_logs or scratch)
        log_dir.mkdir(parents=True, exist_ok=True)
        store = open_store(namespace)
        try:
            with NodeFleet(namespace, log_dir, TIMINGS) as fleet:
                try:
                    results = _scenarios(_Bench(fleet, store, runner))
                except DeadlineExceeded as error:
                    raise DeadlineExceeded(f"{error}\n{fleet.tail(20)}") from error
        finally:
            runner.run(_delete_namespace(store, namespace))
            _remove_file_namespace(namespace)
    figures: dict[str, Any] = {
        "store": namespace if url is None else open_store(url).url,
        "nodes_run_as": NODES_AS,
        "vnode_count": VNODES,
        "timings_s": {
            "ttl": TIMINGS.ttl_s,
            "poll": TIMINGS.poll_s,
            "debounce": TIMINGS.debounce_s,
            "retry_delay": TIMINGS.retry_delay_s,
            "checkpoint_interval": TIMINGS.checkpoint_interval_s,
        },
        "event_resolution_s": 0.02,
        "requests_method": REQUESTS_METHOD,
        **results,
        "target_s": TARGET_S,
    }
    figures["meets_target"] = all(
        figures[name]["excluding_debounce_s"] < TARGET_S for name in ("join", "leave")
    )
    return figures


def print_figures(figures: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print_json(figures)
        return
    for name, value in figures.items():
        if isinstance(value, dict):
            console.print(f"{name}:")
            for key, item in value.items():
                console.print(f"  {key:<34} {item}")
        else:
            console.print(f"{name:<36} {value}")
