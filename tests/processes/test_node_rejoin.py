"""A real node process cut off from the store for longer than its ttl rejoins by itself (issue 15
"A node cut off from the store rejoins by itself"; rebalance/node/rejoin.py).

Three stream nodes on one file:// store; node 3 starts with a scripted outage (the node's hidden
`--fault-outage START:END`: every store request of that process fails in the window, which is
three ttls long). The test sees node 3 fenced, waiting to rejoin (one `rejoining` line per
attempt, `/readyz` not ready with the reason while its metrics endpoint stays up), then rejoin
in the same process with a newer term once the store answers, own vnodes again, and the
committed output of a workload produced before, during and after the outage equal the
independently folded aggregates: every event exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.harness.fleet import Run
from laminar_cluster.harness.workload import Workload, expected_aggregates
from tests.processes.test_stream_processes import TIMINGS, _cluster, _produced
from tests.support.http import http_get

SEED = 15
FIRST = Workload(seed=SEED, events=20_000, partitions=16, keys=500)
SECOND = Workload(seed=SEED, events=30_000, partitions=16, keys=500)  # extends FIRST
THIRD = Workload(seed=SEED, events=40_000, partitions=16, keys=500)  # extends SECOND
OUTAGE_AT_S = 20.0  # after node 3's start: the cluster has usually settled by then
OUTAGE_S = 3 * TIMINGS.ttl_s


def _events(run: Run, name: str) -> list[dict[str, Any]]:
    return [event for event in run.events if event["event"] == name]


@pytest.mark.processes
def test_ml13_a_node_cut_off_past_its_ttl_rejoins_and_every_event_counts_once(
    tmp_path: Path,
) -> None:
    with _cluster(tmp_path) as cluster:
        fleet = cluster.fleet
        _produced(cluster.produce(FIRST), cluster.remaining_s())
        fleet.start(1)
        fleet.start(2)
        outage = f"{OUTAGE_AT_S}:{OUTAGE_AT_S + OUTAGE_S}"
        victim = fleet.start(3, ["--fault-outage", outage, "--metrics-port", "0"])
        cluster.wait_exactly_once(expected_aggregates(FIRST), "3 nodes commit the first part")

        fleet.wait_until("node 3 fenced", lambda: bool(_events(victim, "fenced")), 120)
        fenced = _events(victim, "fenced")[0]
        assert fenced["rejoin"] is True, fenced
        producer = cluster.produce(SECOND)  # while node 3 is cut off
        fleet.wait_until("node 3 waits to rejoin", lambda: bool(_events(victim, "rejoining")), 60)
        started = _events(victim, "started")[0]
        readyz = started["metrics_url"].replace("/metrics", "/readyz")
        status, body = http_get(readyz)  # the endpoint stays up while the node rejoins
        rejoined_already = bool(_events(victim, "rejoined"))
        assert rejoined_already or (status == 503 and "rejoining after a fence" in body), body
        _produced(producer, cluster.remaining_s())

        fleet.wait_until("node 3 rejoined", lambda: bool(_events(victim, "rejoined")), 120)
        assert victim.alive  # the same process: no outside supervisor
        acquired = _events(victim, "acquired")
        assert len(acquired) >= 2 and acquired[-1]["term"] > acquired[0]["term"]
        assert acquired[-1]["boot"] != acquired[0]["boot"]
        waits = _events(victim, "rejoining")
        assert all(w["reason"] and w["next_attempt_t_mono"] >= w["t_mono"] for w in waits)
        rejoined_at = _events(victim, "rejoined")[0]["t_mono"]

        def owns_vnodes_again() -> bool:
            adopted = [e for e in _events(victim, "adopted") if e["t_mono"] > rejoined_at]
            return bool(adopted) and adopted[-1]["vnodes"] > 0

        fleet.wait_until("node 3 owns vnodes again", owns_vnodes_again, cluster.remaining_s())
        fleet.wait_until(
            "the head is rendezvous over 1, 2, 3 again",
            lambda: cluster.head_is_rendezvous([1, 2, 3]),
            cluster.remaining_s(),
        )
        _produced(cluster.produce(THIRD), cluster.remaining_s())
        cluster.wait_exactly_once(expected_aggregates(THIRD), "all three parts, exactly once")
        fleet.wait_until(
            "node 3 ready again", lambda: http_get(readyz)[0] == 200, cluster.remaining_s()
        )
        assert all(run.alive for run in fleet.runs)
        print(
            f"node 3: fenced at {fenced['t_mono']:.1f}, {len(waits)} rejoin attempts, rejoined "
            f"at {rejoined_at:.1f} (term {acquired[0]['term']} -> {acquired[-1]['term']}); "
            f"{cluster.remaining_s():.0f} s of the budget left"
        )
