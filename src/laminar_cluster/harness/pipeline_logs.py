"""Figures read from the JSON-lines logs of stream node processes (`rebalance.node.log`), for the
demo, `bench pipeline` and the chaos test.

The nodes share this host's CLOCK_MONOTONIC (`t_mono`), and so does the process reading the
logs, so a kill timed here and a node's event compare directly (resolution: the node monitor's
interval). The events used: `leader` / `leader_lost`, `adopted`, `activated`, `rotated`,
`checkpoint` (a committed cluster checkpoint the leader drove: `epoch`, `fence_version`,
`took_s`) and `checkpoint_failed`.

Failover and recovery are measured from a kill to a committed checkpoint (issue 7: "recovery
time after a SIGKILL (from the kill to the first commit that includes the lost vnodes)"). A
commit includes the lost vnodes when the killed boot is not a participant of its fence: every
vnode of a committed fence has a live owner, so the killed boot's vnodes are then owned, and
restored, by others. Whether the fence names the killed boot is read from the assignment
snapshot of its version in the store.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from laminar_cluster.assignment.snapshot_io import load_effective
from laminar_cluster.harness.fleet import Event, NodeFleet, Run
from laminar_cluster.store import ObjectStore


def events_of(runs: Iterable[Run], name: str) -> list[tuple[Run, Event]]:
    """Every `name` event of `runs`, by `t_mono`."""
    found = [(run, event) for run in runs for event in run.events if event["event"] == name]
    return sorted(found, key=lambda pair: float(pair[1]["t_mono"]))


def leader_run(fleet: NodeFleet) -> Run | None:
    """The live run whose last leadership mark is `leader` (the latest such mark if several)."""
    best: tuple[float, Run] | None = None
    for run in fleet.live_runs():
        marks = [e for e in run.events if e["event"] in ("leader", "leader_lost")]
        if marks and marks[-1]["event"] == "leader":
            at = float(marks[-1]["t_mono"])
            if best is None or at > best[0]:
                best = (at, run)
    return None if best is None else best[1]


def adopted_version(run: Run) -> int:
    """The assignment version the run last logged adopting (0 before any)."""
    adopted = [e for e in run.events if e["event"] == "adopted"]
    return int(adopted[-1]["version"]) if adopted else 0


def owned_vnodes(run: Run) -> int:
    adopted = [e for e in run.events if e["event"] == "adopted"]
    return int(adopted[-1]["vnodes"]) if adopted else 0


def percentile(samples: list[float], q: float) -> float | None:
    """The `q` quantile (0..1) by the inclusive method; None without samples."""
    if not samples:
        return None
    if len(samples) == 1:
        return samples[0]
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[max(0, min(98, round(q * 100) - 1))]


def checkpoint_figures(runs: Iterable[Run], *, since: float = 0.0) -> dict[str, Any]:
    """Committed and failed checkpoints the leaders logged after `since`, with the duration
    (prepare to recorded outcome) p50/p99 in seconds."""
    runs = list(runs)
    commits = [e for _, e in events_of(runs, "checkpoint") if e["t_mono"] >= since]
    failed = [e for _, e in events_of(runs, "checkpoint_failed") if e["t_mono"] >= since]
    took = [float(e["took_s"]) for e in commits]
    p50, p99 = percentile(took, 0.5), percentile(took, 0.99)
    return {
        "committed": len(commits),
        "failed": len(failed),
        "duration_p50_s": None if p50 is None else round(p50, 4),
        "duration_p99_s": None if p99 is None else round(p99, 4),
    }


def rotations(runs: Iterable[Run]) -> list[int]:
    """The assignment versions after the seed (v1) leaders logged rotating to, ascending, each
    once: graceful rotations and recovery generations alike."""
    return sorted({v for _, e in events_of(runs, "rotated") if (v := int(e["version"])) > 1})


@dataclass(frozen=True, slots=True)
class KillFigures:
    """From a SIGKILL at `killed_at` of `killed` (node, boot)."""

    killed_node: int
    new_leader_s: float | None  # to the first `leader` mark of another run
    failover_s: float | None  # to another leader's first committed checkpoint
    recovery_s: float | None  # to the first commit whose fence excludes the killed boot
    recovery_version: int | None  # that commit's fence version

    def as_json(self) -> dict[str, Any]:
        return {
            "killed_node": self.killed_node,
            "new_leader_s": _rounded(self.new_leader_s),
            "failover_s": _rounded(self.failover_s),
            "recovery_s": _rounded(self.recovery_s),
            "recovery_fence_version": self.recovery_version,
        }


async def kill_figures(
    store: ObjectStore, fleet: NodeFleet, killed: Run, killed_at: float
) -> KillFigures:
    """The figures of one SIGKILL of `killed` at `killed_at` (monotonic seconds)."""
    others = [run for run in fleet.runs if run is not killed]
    leaders = [e for _, e in events_of(others, "leader") if e["t_mono"] >= killed_at]
    commits = [(r, e) for r, e in events_of(others, "checkpoint") if e["t_mono"] >= killed_at]
    failover = next((e for r, e in commits if r.node != killed.node), None)
    recovery = None
    excluded: dict[int, bool] = {}
    for _, event in commits:
        version = int(event["fence_version"])
        if version not in excluded:
            excluded[version] = await _fence_excludes(store, version, killed.node, killed.boot)
        if excluded[version]:
            recovery = event
            break
    return KillFigures(
        killed_node=killed.node,
        new_leader_s=_since(leaders[0] if leaders else None, killed_at),
        failover_s=_since(failover, killed_at),
        recovery_s=_since(recovery, killed_at),
        recovery_version=None if recovery is None else int(recovery["fence_version"]),
    )


async def _fence_excludes(store: ObjectStore, version: int, node: int, boot: str | None) -> bool:
    snapshot = await load_effective(store, version)
    if snapshot is None:  # pruned: versions are pruned only well behind the head
        return False
    if boot is None:  # the killed run never logged its boot: judge by the owner map
        return node not in snapshot.owners
    return all((p.node_id, p.boot_incarnation) != (node, boot) for p in snapshot.participants)


def recovery_timeline(
    fleet: NodeFleet, killed: Run, killed_at: float, version: int
) -> dict[str, float | None]:
    """Seconds from the kill of `killed` to: another node seeing it dead (its full ttl
    unchanged, ML-4), the leader logging the rotation to recovery `version`, and every live
    node running `version`."""
    others = [run for run in fleet.runs if run is not killed]
    dead = [
        e
        for _, e in events_of(others, "members")
        if e["t_mono"] >= killed_at and {"node": killed.node, "state": "dead"} in e["members"]
    ]
    rotated = [
        e
        for _, e in events_of(others, "rotated")
        if e["t_mono"] >= killed_at and int(e["version"]) == version
    ]
    adopted = [
        min(
            (
                float(e["t_mono"])
                for e in run.events
                if e["event"] == "adopted" and e["version"] >= version
            ),
            default=None,
        )
        for run in fleet.live_runs()
    ]
    running = None if not adopted or None in adopted else max(a for a in adopted if a is not None)
    return {
        "seen_dead_s": _rounded(_since(dead[0] if dead else None, killed_at)),
        "recovery_rotated_s": _rounded(_since(rotated[0] if rotated else None, killed_at)),
        "all_running_s": None if running is None else round(running - killed_at, 3),
    }


def _since(event: Event | None, at: float) -> float | None:
    return None if event is None else float(event["t_mono"]) - at


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
