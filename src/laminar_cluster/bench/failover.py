"""`laminar-cluster bench failover`: how long leadership is lost when the leader dies
(LA §4.9, LA §6 "Takeover latency"; invariant LA-8).

Three contender processes (`laminar_cluster.harness.contender`, started with `python -m`, i.e.
spawned) share a fresh namespace of the store. Each round: wait for a steady leader (the
durable head's owner, believed by its process, renewed a few times), SIGKILL it at a random
phase of its renewal period, and time from the kill (monotonic, in this process) to the first
`granted` event of another contender (monotonic, same host clock); then restart the killed
node. Reported: p50/p99 failover, the ratio failover/TTL, the floor the takeover rule allows
(TTL minus half a renewal period: the kill lands on average half a period after the last
renewal, and a rival may take over only a full TTL after it), and the leader's store requests
per renewal in steady state (each contender counts its requests with `CountingStore` and logs
the running total with every renewal).

Every round also checks LA-8 on the logs: the new term was granted after the killed leader's
last believed deadline (`s8_margin_min_s` > 0).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from laminar_cluster.bench.store import percentile
from laminar_cluster.clock import RealClock
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument
from laminar_cluster.harness.contender_fleet import ContenderFleet
from laminar_cluster.lease.log import load_published_head
from laminar_cluster.store import ObjectStore, open_store

NODES: Final = (1, 2, 3)
STEADY_RENEWALS: Final = 3  # renewals of the leader before a kill, so the rivals observe it
POLL_S: Final = 0.01
TARGET_ABOVE_FLOOR_S: Final = 0.25
TARGET_REQUESTS_PER_RENEWAL: Final = 3.0


def _fresh_namespace(url: str) -> str:
    """`url` with a fresh path segment appended: a new, empty namespace of the same store."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() == "memory":
        raise InvalidArgument(
            f"{url}: memory:// lives in one process; failover needs a shared store (file://, s3://)"
        )
    path = f"{parsed.path.rstrip('/')}/bench-failover-{uuid.uuid4().hex[:12]}"
    return urllib.parse.urlunsplit(parsed._replace(path=path))


@dataclass
class _Bench:
    fleet: ContenderFleet
    runner: asyncio.Runner
    store: ObjectStore  # the namespace, for reading the durable head
    rng: random.Random = field(default_factory=random.Random)

    def steady_leader(self) -> tuple[int, int]:
        """Wait until every node runs and one leads steadily; (node, token) of that leader,
        confirmed against the durable head's owner."""
        fleet = self.fleet
        deadline = time.monotonic() + 20 * fleet.ttl_s + 30
        while time.monotonic() < deadline:
            time.sleep(POLL_S * 5)
            fleet.refresh()
            fleet.require_running(NODES)
            found = fleet.believer(time.monotonic())
            if found is None or not all(fleet.alive(n) and fleet.current_run(n) for n in NODES):
                continue
            node, token = found
            run = fleet.current_run(node)
            renewals = [e for e in run if e["event"] == "renewed" and e["token"] == token]
            if len(renewals) < STEADY_RENEWALS:
                continue
            head = self.runner.run(load_published_head(self.store, RealClock()))
            if head is None:
                continue
            lease = head.record.lease
            if (lease.owner.node, lease.owner.boot, lease.token) == (node, run[0]["boot"], token):
                return node, token
        raise DeadlineExceeded("bench failover: no steady leader emerged")

    def first_grant_after(self, killed: int, token: int, kill_at: float) -> dict[str, Any]:
        """The earliest `granted` event of another node after the kill, with a newer token."""
        fleet = self.fleet
        deadline = kill_at + 10 * fleet.ttl_s + 30
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            fleet.refresh()
            grants = [
                event
                for node in NODES
                if node != killed
                for event in fleet.current_run(node)
                if event["event"] == "granted" and event["token"] > token
            ]
            if grants:
                return min(grants, key=lambda event: float(event["believed_from"]))
        raise DeadlineExceeded(f"bench failover: no new leader after node {killed} was killed")

    def round(self) -> tuple[float, float, tuple[int, int]]:
        """One kill: (failover s, LA-8 margin s, (requests, renewals) of the killed term)."""
        fleet = self.fleet
        leader, token = self.steady_leader()
        time.sleep(self.rng.uniform(0, fleet.renew_interval_s))  # a random renewal phase
        kill_at = time.monotonic()
        fleet.kill(leader)
        fleet.refresh()
        run = [e for e in fleet.current_run(leader) if e.get("token") == token]
        last_until = max(float(e["until"]) for e in run if e.get("until") is not None)
        grant = self.first_grant_after(leader, token, kill_at)
        fleet.start(leader)
        granted_at = float(grant["believed_from"])  # when the acquiring response arrived
        # LA-8: the new term was granted only after the killed leader's last deadline.
        return granted_at - kill_at, granted_at - last_until, _renewal_cost(run)


def _renewal_cost(term_events: list[dict[str, Any]]) -> tuple[int, int]:
    """(requests, renewals) of one leader term from its grant to its last logged renewal: the
    leader does nothing else meanwhile (no decisions in the bench)."""
    marks = [int(e["requests"]) for e in term_events if e["event"] in ("granted", "renewed")]
    if len(marks) < 2:
        return 0, 0
    return marks[-1] - marks[0], len(marks) - 1


def _figures(
    samples: list[float],
    margins: list[float],
    costs: list[tuple[int, int]],
    ttl_s: float,
    renew_s: float,
) -> dict[str, Any]:
    ordered = sorted(samples)
    p50, p99 = percentile(ordered, 0.50), percentile(ordered, 0.99)
    floor_s = ttl_s - renew_s / 2
    requests, renewals = sum(c[0] for c in costs), sum(c[1] for c in costs)
    per_renewal = round(requests / renewals, 3) if renewals else None
    return {
        "failover_s": [round(sample, 4) for sample in samples],
        "failover_p50_s": round(p50, 4),
        "failover_p99_s": round(p99, 4),
        "failover_min_s": round(ordered[0], 4),
        "failover_max_s": round(ordered[-1], 4),
        "failover_ttl_ratio_p50": round(p50 / ttl_s, 4),
        "failover_ttl_ratio_p99": round(p99 / ttl_s, 4),
        "floor_s": round(floor_s, 4),
        "p50_above_floor_s": round(p50 - floor_s, 4),
        "s8_margin_min_s": round(min(margins), 4),
        "requests_per_renewal": per_renewal,
        "renewals_measured": renewals,
        "target_p50_above_floor_s": TARGET_ABOVE_FLOOR_S,
        "target_requests_per_renewal": TARGET_REQUESTS_PER_RENEWAL,
        "meets_failover_target": p50 - floor_s <= TARGET_ABOVE_FLOOR_S,
        "meets_request_target": per_renewal is not None
        and per_renewal <= TARGET_REQUESTS_PER_RENEWAL,
    }


def run_bench_failover(
    url: str,
    *,
    rounds: int,
    ttl_s: float = 3.0,
    renew_interval_s: float = 1.0,
    keep_logs: str | None = None,
) -> dict[str, Any]:
    """Kill the leader of 3 contenders `rounds` times on a fresh namespace of `url`; return the
    figures (JSON-ready). The namespace is deleted afterwards; the contenders' logs too, unless
    `keep_logs` names a directory for them."""
    if rounds < 1:
        raise InvalidArgument(f"bench failover: rounds must be at least 1, not {rounds}")
    if not 0 < renew_interval_s < ttl_s:
        raise InvalidArgument(
            f"bench failover: renew interval {renew_interval_s} s must be in (0, ttl {ttl_s} s)"
        )
    namespace = _fresh_namespace(url)
    samples: list[float] = []
    margins: list[float] = []
    costs: list[tuple[int, int]] = []
    stop_after_s = rounds * (20 * ttl_s + 60) + 60  # a safety net; the bench stops them first
    with (
        tempfile.TemporaryDirectory(prefix="laminar-bench-failover-") as scratch,
        asyncio.Runner() as runner,
    ):
        store = open_store(namespace)
        try:
            log_dir = Path(keep_logs or scratch)
            log_dir.mkdir(parents=True, exist_ok=True)
            with ContenderFleet(
                namespace,
                log_dir,
                ttl_s=ttl_s,
                renew_interval_s=renew_interval_s,
                decisions=False,
                stop_after_s=stop_after_s,
            ) as fleet:
                for node in NODES:
                    fleet.start(node)
                bench = _Bench(fleet=fleet, runner=runner, store=store)
                for _ in range(rounds):
                    failover_s, margin_s, cost = bench.round()
                    samples.append(failover_s)
                    margins.append(margin_s)
                    costs.append(cost)
        finally:
            runner.run(_delete_namespace(store, namespace))
            _remove_file_namespace(namespace)
    figures: dict[str, Any] = {
        "store": open_store(url).url,
        "namespace": urllib.parse.urlsplit(namespace).path,
        "rounds": rounds,
        "contenders": len(NODES),
        "ttl_s": ttl_s,
        "renew_interval_s": renew_interval_s,
    }
    figures.update(_figures(samples, margins, costs, ttl_s, renew_interval_s))
    return figures


async def _delete_namespace(store: ObjectStore, namespace: str) -> None:
    try:
        for meta in await store.list(""):
            await store.delete(meta.key)
    finally:
        await store.close()


def _remove_file_namespace(namespace: str) -> None:
    """A file:// namespace also leaves its directories behind: remove them."""
    parsed = urllib.parse.urlsplit(namespace)
    if parsed.scheme.lower() == "file" and os.path.isdir(parsed.path):
        shutil.rmtree(parsed.path, ignore_errors=True)
