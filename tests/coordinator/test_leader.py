"""`ClusterCheckpointer` with real participants (docs/protocols/distributed-checkpoint.md):
Commit with every fence participant sealed (DC-2, DC-3), Abort on a missing, refusing or
wrongly acking participant (DC-4, DC-5), IDs never reused (DC-1), the previous attempt settled
before a newer prepare (DC-7). A real authority and decision store on memory:// and file://.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
)
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.collect import Expected, collect_acks
from laminar_cluster.coordinator.leader import _Unsettled
from laminar_cluster.coordinator.objects import (
    EMPTY_STATE_SHA256,
    MANIFEST_VERSION,
    PREPARE_VERSION,
    encode_record,
)
from laminar_cluster.coordinator.paths import (
    ATTEMPTS_PREFIX,
    manifest_path,
    parse_prepare_path,
    prepare_path,
)
from laminar_cluster.coordinator.records import (
    CheckpointPrepare,
    ParticipantManifest,
    VnodeSlice,
)
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.store import CREATE
from tests.coordinator.support import Cluster, make_cluster


def run(url: str, body: Callable[[Cluster], Awaitable[None]], **options: object) -> None:
    async def main() -> None:
        cluster = await make_cluster(url, **options)  # type: ignore[arg-type]
        await body(cluster)

    asyncio.run(main())


async def outcome_of(cluster: Cluster, checkpoint_id: int) -> CheckpointOutcome:
    outcome = await cluster_outcome(cluster.authority, checkpoint_id)
    assert outcome is not None
    return outcome


async def capsule_of(cluster: Cluster, outcome: CheckpointOutcome) -> ClusterRecoveryCapsule:
    assert outcome.recovery_capsule is not None
    return await cluster.decisions.load_recovery_capsule(outcome.recovery_capsule)


async def checkpoint(cluster: Cluster, deadline_s: float = 20.0) -> CheckpointResult:
    return await cluster.leader(cluster.fence, None, deadline=cluster.deadline(deadline_s))


async def prepared_ids(cluster: Cluster) -> list[int]:
    listed = await cluster.store.list(ATTEMPTS_PREFIX)
    return [parse_prepare_path(m.key) for m in listed if m.key.endswith("/prepare.json")]


@pytest.mark.parametrize("owners", [(1, 1, 2, 2), (1, 1, 1, 2, 2, 2, 3, 3)])
def test_dc2_commit_with_every_participant(url: str, owners: tuple[int, ...]) -> None:
    async def body(cluster: Cluster) -> None:
        nodes = sorted(set(owners))
        participants = [cluster.participant(cluster.host(n)) for n in nodes]
        async with cluster.running(participants):
            result = await checkpoint(cluster)
            assert result.success, result.error
            for _ in range(2_000):  # the participants see the Commit
                if all(h.resolutions for h in cluster.hosts.values()):
                    break
                await asyncio.sleep(0.005)
        attempt = CheckpointAttempt.canonical(result.checkpoint_id)
        outcome = await outcome_of(cluster, result.checkpoint_id)
        assert outcome.verdict is CheckpointVerdict.COMMIT
        assert outcome.assignment_fence == cluster.fence
        await cluster.decisions.validate_recovery_capsule_for_outcome(outcome)
        capsule = await capsule_of(cluster, outcome)
        assert capsule.portable and capsule.predecessor is None
        assert capsule.attempt == attempt
        for p in capsule.participants:  # DC-3: the digest of exactly the manifest's bytes
            assert p.vnodes == cluster.vnodes_of(p.node_id)
            got = await cluster.store.get(manifest_path(attempt.checkpoint_id, p.node_id))
            assert p.manifest_sha256 == sha256_hex(got.body)
        # The union of every partial's offsets (the fake host cuts partition v of vnode v).
        assert capsule.source_offsets == {
            str(v): 1000 * attempt.checkpoint_id + v for v in range(len(owners))
        }
        for host in cluster.hosts.values():
            assert host.cuts == [attempt] and host.resolutions == [(attempt, True)]
        assert cluster.leader.last is not None
        assert cluster.leader.last.verdict is CheckpointVerdict.COMMIT

    run(url, body, owners=owners)


def test_dc2_successive_commits_chain_their_capsules(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            first = await checkpoint(cluster)
            second = await checkpoint(cluster)
        assert first.success and second.success, (first.error, second.error)
        assert second.checkpoint_id > first.checkpoint_id
        one = await outcome_of(cluster, first.checkpoint_id)
        two = await outcome_of(cluster, second.checkpoint_id)
        assert (await capsule_of(cluster, two)).predecessor == one.recovery_capsule

    run(url, body)


def test_dc2_abort_on_a_participant_missing_at_the_deadline(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2)]  # node 3 is down
        async with cluster.running(participants):
            result = await checkpoint(cluster, deadline_s=1.5)
            for _ in range(2_000):
                if all(h.resolutions for h in cluster.hosts.values()):
                    break
                await asyncio.sleep(0.005)
        assert not result.success
        assert "no valid manifest by the deadline from nodes 3" in str(result.error)
        ids = await prepared_ids(cluster)
        outcome = await outcome_of(cluster, ids[-1])
        assert outcome.verdict is CheckpointVerdict.ABORT and outcome.recovery_capsule is None
        attempt = CheckpointAttempt.canonical(ids[-1])
        for host in cluster.hosts.values():  # DC-6: acked, then told Abort
            assert host.resolutions == [(attempt, False)]
        assert cluster.leader.last is not None and cluster.leader.last.missing == (3,)

    run(url, body)


def test_dc6_a_refusing_participant_aborts_the_attempt(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        hosts = [cluster.host(1), cluster.host(2), cluster.host(3, refuse=True)]
        async with cluster.running([cluster.participant(h) for h in hosts]):
            result = await checkpoint(cluster, deadline_s=1.5)
            for _ in range(2_000):
                if all(h.resolutions for h in hosts):
                    break
                await asyncio.sleep(0.005)
        assert not result.success and "from nodes 3" in str(result.error)
        attempt = CheckpointAttempt.canonical((await prepared_ids(cluster))[-1])
        assert (await outcome_of(cluster, attempt.epoch)).verdict is CheckpointVerdict.ABORT
        assert hosts[2].cuts == [] and hosts[2].resolutions == [(attempt, False)]
        assert hosts[0].resolutions == [(attempt, False)]

    run(url, body)


def test_dc3_a_manifest_that_cannot_verify_aborts_at_once(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        async def rogue() -> None:
            """Node 3 acks with the wrong vnodes as soon as the prepare is there."""
            for _ in range(4_000):
                ids = await prepared_ids(cluster)
                if ids:
                    break
                await asyncio.sleep(0.005)
            attempt = CheckpointAttempt.canonical(ids[-1])
            prepare = await cluster.store.get(prepare_path(attempt.checkpoint_id))
            manifest = ParticipantManifest(
                version=MANIFEST_VERSION,
                attempt=attempt,
                participant=cluster.fence.participants[2],
                prepare_sha256=sha256_hex(prepare.body),
                slices=(
                    VnodeSlice(vnode=7, state_sha256=EMPTY_STATE_SHA256, offsets={}, holder=None),
                ),
                state_bytes=0,
                output_b64="",
            )
            key = manifest_path(attempt.checkpoint_id, 3)
            await cluster.store.put(key, encode_record(manifest, key=key), CREATE)

        participants = [cluster.participant(cluster.host(n)) for n in (1, 2)]
        async with cluster.running(participants), asyncio.TaskGroup() as group:
            group.create_task(rogue())
            started = cluster.clock.monotonic()
            result = await checkpoint(cluster, deadline_s=20.0)
        assert cluster.clock.monotonic() - started < 10.0  # not at the deadline
        assert not result.success and "participant 3 acked wrongly" in str(result.error)
        assert "manifest covers 1 vnodes; the owner map gives node 3 2" in str(result.error)
        ids = await prepared_ids(cluster)
        assert (await outcome_of(cluster, ids[-1])).verdict is CheckpointVerdict.ABORT

    run(url, body)


def test_dc1_ids_are_never_reused_after_an_abort(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        hosts = {n: cluster.host(n) for n in (1, 2, 3)}
        participants = {n: cluster.participant(h) for n, h in hosts.items()}
        async with cluster.running([participants[1], participants[2]]):
            aborted = await checkpoint(cluster, deadline_s=1.0)
        assert not aborted.success
        first = (await prepared_ids(cluster))[-1]
        async with cluster.running(list(participants.values())):
            committed = await checkpoint(cluster)
        assert committed.success, committed.error
        assert committed.checkpoint_id > first  # DC-1
        # DC-13: the Commit's retention step deleted the aborted attempt's prepare.
        assert (await prepared_ids(cluster)) == [committed.checkpoint_id]
        assert (await outcome_of(cluster, first)).verdict is CheckpointVerdict.ABORT
        assert hosts[3].cuts == [CheckpointAttempt.canonical(committed.checkpoint_id)]

    run(url, body)


def test_dc7_the_previous_unsettled_attempt_is_aborted_before_a_newer_prepare(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        # An attempt whose outcome this instance failed to record (DC-7).
        checkpoint_id = await cluster.decisions.allocate_checkpoint_id(deadline=cluster.deadline())
        attempt = CheckpointAttempt.canonical(checkpoint_id)
        prepare = CheckpointPrepare(
            version=PREPARE_VERSION,
            attempt=attempt,
            fence=cluster.fence,
            leader_proof=cluster.proof,
            drain_transition=None,
        )
        key = prepare_path(checkpoint_id)
        await cluster.store.put(key, encode_record(prepare, key=key), CREATE)
        cluster.leader._unsettled = _Unsettled(attempt, cluster.fence, cluster.proof)
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            result = await checkpoint(cluster)
        assert result.success, result.error
        assert (await outcome_of(cluster, checkpoint_id)).verdict is CheckpointVerdict.ABORT
        assert result.checkpoint_id > checkpoint_id

    run(url, body)


def test_no_checkpoint_without_a_leader_proof(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        cluster.leader.proof = lambda: None
        result = await checkpoint(cluster)
        assert not result.success and "not the leader" in str(result.error)
        assert await prepared_ids(cluster) == []

    run(url, body)


def test_dc19_a_lost_participant_aborts_the_collection_at_once(url: str) -> None:
    """The membership view holds node 3 lost while its manifest is missing: Abort at once,
    long before the deadline."""

    async def body(cluster: Cluster) -> None:
        cluster.leader.collector.lost = lambda fence: {3}
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2)]  # node 3 is down
        async with cluster.running(participants):
            started = cluster.clock.monotonic()
            result = await checkpoint(cluster, deadline_s=20.0)
            took_s = cluster.clock.monotonic() - started
        assert not result.success and "participants 3 are suspected, dead" in str(result.error)
        assert took_s < 5.0  # not at the collection deadline (19.5 s)
        ids = await prepared_ids(cluster)
        assert (await outcome_of(cluster, ids[-1])).verdict is CheckpointVerdict.ABORT
        assert cluster.leader.last is not None and 3 in cluster.leader.last.missing

    run(url, body)


def test_dc19_a_participant_lost_after_its_ack_still_counts(url: str) -> None:
    """A lost participant whose manifest is there (it acked, then was lost) is sealed: the
    collection polls once before it gives up on it."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            result = await checkpoint(cluster)
        assert result.success, result.error
        attempt = CheckpointAttempt.canonical(result.checkpoint_id)
        body_of_prepare = (await cluster.store.get(prepare_path(attempt.checkpoint_id))).body

        async def no_baseline() -> None:
            return None

        expected = Expected(
            attempt, cluster.fence, cluster.owners, sha256_hex(body_of_prepare), no_baseline
        )
        collection = await collect_acks(
            cluster.store,
            cluster.clock,
            expected,
            poll_s=5.0,  # a poll only at once: the wait would outlast the test
            first_wait_s=5.0,
            until=cluster.deadline(10.0),
            lost=lambda fence: {1, 2, 3},
        )
        assert sorted(collection.sealed) == [1, 2, 3] and collection.lost == ()
        assert collection.polls == 1

    run(url, body)
