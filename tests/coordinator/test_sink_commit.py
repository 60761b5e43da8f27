"""The sink's durable commit markers (DC-12): the leader writes `committed.json` right after its
Commit (create-only: the same bytes again are fine, other bytes are CorruptRecord), and a leader
that crashed between the Commit and the marker leaves it to the next leader's first call.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import pytest

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.coordinator.paths import manifest_path, sink_commit_path
from laminar_cluster.coordinator.records import ParticipantManifest
from laminar_cluster.coordinator.sink_commits import (
    read_sink_commit,
    sink_commit_from_outcome,
    write_sink_commit,
)
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.interfaces import CheckpointResult
from tests.coordinator.support import POLL_S, Cluster, make_cluster


def run(url: str, body: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(await make_cluster(url))

    asyncio.run(main())


async def checkpoint(cluster: Cluster, leader: ClusterCheckpointer) -> CheckpointResult:
    result = await leader(cluster.fence, None, deadline=cluster.deadline())
    assert result.success, result.error
    return result


async def commit_of(cluster: Cluster, checkpoint_id: int) -> CheckpointOutcome:
    outcome = await cluster_outcome(cluster.authority, checkpoint_id)
    assert outcome is not None and outcome.is_commit()
    return outcome


async def output_digests(cluster: Cluster, checkpoint_id: int) -> list[tuple[int, str]]:
    """(node, SHA-256 of the output its manifest holds) per node."""
    found = []
    for node in (1, 2, 3):
        manifest = msgspec.json.decode(
            (await cluster.store.get(manifest_path(checkpoint_id, node))).body,
            type=ParticipantManifest,
        )
        output = base64.b64decode(manifest.output_b64)
        assert output == f"out-{node}-{checkpoint_id}".encode()
        found.append((node, sha256_hex(output)))
    return found


def digests(outputs: Sequence[tuple[FenceParticipant, str]]) -> list[tuple[int, str]]:
    return [(p.node_id, d) for p, d in outputs]


def test_dc12_a_commit_writes_its_sink_commit_marker(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            result = await checkpoint(cluster, cluster.leader)
        outcome = await commit_of(cluster, result.checkpoint_id)
        marker = await read_sink_commit(cluster.store, result.checkpoint_id)
        assert marker is not None
        assert (marker.attempt, marker.fence) == (outcome.attempt, cluster.fence)
        assert marker.capsule == outcome.recovery_capsule
        assert [o.participant for o in marker.outputs] == list(cluster.fence.participants)
        assert digests([(o.participant, o.output_sha256) for o in marker.outputs]) == (
            await output_digests(cluster, result.checkpoint_id)
        )
        # Rebuilt from the outcome, the capsule and the manifests: the same record.
        assert await sink_commit_from_outcome(cluster.store, cluster.decisions, outcome) == marker
        await write_sink_commit(cluster.store, marker)  # identical bytes: fine
        other = msgspec.structs.replace(marker, outputs=marker.outputs[:2])
        with pytest.raises(CorruptRecord, match="holds another sink commit marker"):
            await write_sink_commit(cluster.store, other)
        assert cluster.leader.last is not None and cluster.leader.last.markers_repaired == 0

    run(url, body)


def test_dc12_a_leader_crashed_between_commit_and_marker_is_repaired_by_the_next(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        async def crash(*_: object) -> None:
            return None  # the process died after recording the Commit: no marker

        first = cluster.leader
        first.upkeep.mark = crash  # type: ignore[method-assign]
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            lost = await checkpoint(cluster, first)
            assert await read_sink_commit(cluster.store, lost.checkpoint_id) is None
            # The next leader (a fresh instance, its own store client) repairs it first.
            store, decisions, authority = cluster.client()
            second = ClusterCheckpointer(
                decisions,
                authority,
                proof=lambda: cluster.proof,
                owners_of=first.owners_of,
                poll_s=POLL_S,
                store=store,
                abort_reserve_s=0.5,
            )
            newer = await checkpoint(cluster, second)
            assert second.last is not None and second.last.markers_repaired == 1
            again = await checkpoint(cluster, second)  # nothing left to repair: no request
            assert second.last is not None and second.last.markers_repaired == 0
        repaired = await read_sink_commit(cluster.store, lost.checkpoint_id)
        assert repaired is not None
        assert repaired == await sink_commit_from_outcome(
            cluster.store, cluster.decisions, await commit_of(cluster, lost.checkpoint_id)
        )
        assert digests([(o.participant, o.output_sha256) for o in repaired.outputs]) == (
            await output_digests(cluster, lost.checkpoint_id)
        )
        for result in (newer, again):  # the next leader's own Commits have theirs
            assert await cluster.store.head(sink_commit_path(result.checkpoint_id))

    run(url, body)


def test_dc12_a_marker_that_cannot_be_written_is_repaired_by_the_next_call(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        leader = cluster.leader
        real = leader.upkeep.sink_commits.committed
        failures = [1]

        async def failing(*args: object) -> None:
            if failures:
                failures.pop()
                raise CorruptRecord("injected: the marker write failed")
            await real(*args)  # type: ignore[arg-type]

        leader.upkeep.sink_commits.committed = failing  # type: ignore[method-assign]
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            first = await checkpoint(cluster, leader)  # still a success: the Commit is durable
            assert await read_sink_commit(cluster.store, first.checkpoint_id) is None
            second = await checkpoint(cluster, leader)
            assert leader.last is not None and leader.last.markers_repaired == 1
        for result in (first, second):
            assert await read_sink_commit(cluster.store, result.checkpoint_id) is not None

    run(url, body)
