"""Unchanged vnodes are referenced, not rewritten (DC-16): a vnode whose bytes and offsets are
those of the participant's last committed cut under the same fence is named by that cut's slice
(a reference to the object that holds the bytes, never to another reference); the leader checks
every reference against the last Commit; a restore follows it; retention keeps every state
object the newest Commit (or the handoff pin) names and deletes the others.
"""

from __future__ import annotations

import asyncio

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import read_manifest
from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX, state_path
from laminar_cluster.coordinator.restore import load_cuts
from laminar_cluster.coordinator.slices import CommittedSlices, stage_cut
from tests.assignment.snapshot_support import participant, snapshot
from tests.coordinator.support import Cluster, expected_cut, make_cluster


async def states(cluster: Cluster) -> set[str]:
    return {m.key for m in await cluster.store.list(ATTEMPTS_PREFIX) if "/state/" in m.key}


async def checkpoint(cluster: Cluster) -> int:
    result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
    assert result.success, result.error
    return result.checkpoint_id


def test_dc16_unchanged_vnodes_are_references_restored_and_retained(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        hosts = {n: cluster.host(n, vary=False) for n in (1, 2, 3)}
        async with cluster.running([cluster.participant(h) for h in hosts.values()]):
            first = await checkpoint(cluster)
            second = await checkpoint(cluster)
            third = await checkpoint(cluster)
            # Nothing changed: no state object after the first, every slice names the first's.
            assert await states(cluster) == {state_path(first, n) for n in (1, 2, 3)}
            for node in (1, 2, 3):
                read = await read_manifest(cluster.store, CheckpointAttempt.canonical(third), node)
                assert read is not None and read[0].state_bytes == 0
                assert {s.holder.checkpoint_id for s in read[0].slices if s.holder} == {first}
            outcome = await cluster_outcome(cluster.authority, third)
            assert outcome is not None and outcome.recovery_capsule is not None
            store, decisions, _ = cluster.client()
            cuts = await load_cuts(
                store, decisions, outcome.recovery_capsule, range(8), deadline=cluster.deadline()
            )
            for node in (1, 2, 3):
                unchanged = expected_cut(node, cluster.vnodes_of(node), third, vary=False)
                assert {v: cuts[v] for v in unchanged.vnodes} == unchanged.vnodes
            # Node 2's state changes: it writes its vnodes again; the others still reference
            # the first attempt, whose node 2 object is no longer named and is deleted.
            hosts[2].vary = True
            fourth = await checkpoint(cluster)
        assert second < third < fourth
        assert await states(cluster) == {
            state_path(first, 1),
            state_path(first, 3),
            state_path(fourth, 2),
        }
        read = await read_manifest(cluster.store, CheckpointAttempt.canonical(fourth), 2)
        assert read is not None and read[0].state_bytes > 0
        assert {s.holder.checkpoint_id for s in read[0].slices if s.holder} == {fourth}
        outcome = await cluster_outcome(cluster.authority, fourth)
        assert outcome is not None and outcome.recovery_capsule is not None
        cuts = await load_cuts(
            cluster.store,
            cluster.decisions,
            outcome.recovery_capsule,
            [0, 3, 4, 7],
            deadline=cluster.deadline(),
        )
        assert cuts[3] == expected_cut(2, [3], fourth).vnodes[3]
        assert cuts[0] == expected_cut(1, [0], fourth, vary=False).vnodes[0]
        assert cuts[7] == expected_cut(3, [7], fourth, vary=False).vnodes[7]

    asyncio.run(main())


def test_dc16_a_new_leader_checks_references_against_the_last_commit_it_reads(url: str) -> None:
    """A leader instance that did not record the previous Commit reads its slices once (its
    capsule and manifests) to check the references."""

    async def main() -> None:
        cluster = await make_cluster(url)
        hosts = [cluster.host(n, vary=False) for n in (1, 2, 3)]
        async with cluster.running([cluster.participant(h) for h in hosts]):
            first = await checkpoint(cluster)
            cluster.leader.collector.committed = None  # as a new instance: it knows no slice
            second = await checkpoint(cluster)
        assert await states(cluster) == {state_path(first, n) for n in (1, 2, 3)}
        assert cluster.leader.collector.committed is not None
        assert cluster.leader.collector.committed.checkpoint_id == second

    asyncio.run(main())


def test_dc16_only_a_cut_of_the_same_fence_is_referenced() -> None:
    me = participant(2)
    fence = snapshot_fence(snapshot(1, [1, 2, 2]))
    other = snapshot_fence(snapshot(2, [1, 2, 2]))
    cut = {1: VnodeCut(state=b"one", offsets={1: 4}), 2: VnodeCut(state=b"two", offsets={})}
    first = stage_cut(5, me, fence, cut, None)
    assert first.state == b"onetwo"
    assert [(s.holder.start, s.holder.length) for s in first.slices if s.holder] == [(0, 3), (3, 3)]
    baseline = CommittedSlices(5, fence, {s.vnode: s for s in first.slices})
    again = stage_cut(6, me, fence, cut, baseline)
    assert again.state == b"" and again.slices == first.slices  # references, one hop
    changed = {**cut, 2: VnodeCut(state=b"two", offsets={2: 1})}  # an offset moved
    partly = stage_cut(6, me, fence, changed, baseline)
    assert partly.state == b"two" and partly.slices[0] == first.slices[0]
    assert partly.slices[1].holder is not None and partly.slices[1].holder.checkpoint_id == 6
    moved = stage_cut(6, me, other, cut, baseline)  # another fence: everything written again
    assert moved.state == b"onetwo"
    assert all(s.holder is not None and s.holder.checkpoint_id == 6 for s in moved.slices)
