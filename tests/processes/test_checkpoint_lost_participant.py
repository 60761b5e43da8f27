"""A follower cut off from the store mid-run costs at most one TTL plus one checkpoint round
before commits resume (docs/protocols/distributed-checkpoint.md, DC-19; issue 15).

Three real `laminar-cluster node` processes on one file:// store commit a workload; then a
follower's store is cut off (`--fault-outage-file`: every request of that process fails while
the file exists). The leader's collection aborts as soon as its membership view suspects the
follower (instead of waiting for the checkpoint timeout), so the recovery that moves the
follower's vnodes is not held behind a doomed checkpoint: the first Commit after the cut (under
a fence without the follower) must come within one TTL plus one checkpoint round (the interval
and a checkpoint's own time, at most 2 s here). More events are then produced and the survivors
must commit every event exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.authority.cluster_outcome_reads import highest_cluster_committed_outcome
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.harness.workload import expected_aggregates
from tests.processes.test_stream_processes import FIRST, SECOND, TIMINGS, _cluster, _produced

CHECKPOINT_ROUND_S = TIMINGS.checkpoint_interval_s + 2.0  # the interval and one checkpoint


def _boots_known(fleet: NodeFleet) -> Callable[[], bool]:
    def known() -> bool:
        runs = [fleet.current(node) for node in (1, 2, 3)]
        return all(run is not None and run.boot is not None for run in runs)

    return known


@pytest.mark.processes
def test_dc19_commits_resume_within_a_ttl_and_a_round_after_a_follower_is_cut_off(
    tmp_path: Path,
) -> None:
    outages = {node: tmp_path / f"node-{node}.outage" for node in (1, 2, 3)}
    with _cluster(tmp_path) as cluster:
        fleet = cluster.fleet
        _produced(cluster.produce(FIRST), cluster.remaining_s())
        for node, outage in outages.items():
            fleet.start(node, ("--fault-outage-file", str(outage)))
        cluster.wait_exactly_once(expected_aggregates(FIRST), "3 nodes commit the workload")
        fleet.wait_until("a leader is known", lambda: cluster.leader() is not None, 30.0)
        # Two nodes may commit the workload before the third logged its start: wait for it.
        fleet.wait_until("every node's boot is known", _boots_known(fleet), 30.0)
        leader = cluster.leader()
        assert leader is not None
        follower = fleet.current(next(n for n in (1, 2, 3) if n != leader.node))
        assert follower is not None and follower.boot is not None
        outage = outages[follower.node]

        def commit() -> tuple[int, bool]:
            outcome = cluster.runner.run(highest_cluster_committed_outcome(cluster.authority))
            assert outcome is not None and outcome.assignment_fence is not None
            fence = outcome.assignment_fence
            return outcome.checkpoint_id, fence.participant_incarnation(follower.node) == (
                follower.boot
            )

        def names_everyone() -> bool:
            outcome = cluster.runner.run(highest_cluster_committed_outcome(cluster.authority))
            fence = None if outcome is None else outcome.assignment_fence
            runs = [fleet.current(node) for node in (1, 2, 3)]
            return fence is not None and all(
                run is not None and fence.participant_incarnation(run.node) == run.boot
                for run in runs
            )

        fleet.wait_until("a Commit of the three nodes' fence", names_everyone, 60.0)
        before, names_follower = commit()
        assert names_follower
        outage.touch()
        cut_s = time.monotonic()
        resumed: list[float] = []

        def resumed_without_it() -> bool:
            checkpoint_id, names_follower = commit()
            if checkpoint_id > before and not names_follower:
                resumed.append(time.monotonic() - cut_s)
                return True
            return False

        fleet.wait_until("a Commit without the cut-off follower", resumed_without_it, 60.0)
        bound_s = TIMINGS.ttl_s + CHECKPOINT_ROUND_S
        print(f"commits resumed {resumed[0]:.1f} s after the cut (bound {bound_s:.1f} s)")
        assert resumed[0] <= bound_s
        outage.unlink()
        _produced(cluster.produce(SECOND), cluster.remaining_s())
        cluster.wait_exactly_once(expected_aggregates(SECOND), "the survivors commit the rest")
