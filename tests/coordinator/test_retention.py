"""Retention of attempt objects (DC-13): after a Commit the leader deletes the prepare and the
state objects of older committed attempts and every object of attempts that can never commit,
keeps the marker and manifests of committed attempts (the sink's data) and every state object
a kept cut's slices name (DC-16), never touches the handoff pin's checkpoint, and deletes at most
a bounded number of objects per step, in multi-object deletes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX, AttemptObject, parse_attempt_object
from laminar_cluster.coordinator.retention import AttemptRetention, RetentionStep
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.runtime.output import read_committed_output
from tests.coordinator.support import Cluster, make_cluster

SINK_DATA = {AttemptObject.SINK_COMMIT: 1, AttemptObject.MANIFEST: 3}
EVERYTHING = {**SINK_DATA, AttemptObject.PREPARE: 1, AttemptObject.STATE: 3}


def run(url: str, body: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(await make_cluster(url))

    asyncio.run(main())


async def kept(cluster: Cluster) -> dict[int, dict[AttemptObject, int]]:
    """Objects per attempt, by kind."""
    found: dict[int, dict[AttemptObject, int]] = {}
    for meta in await cluster.store.list(ATTEMPTS_PREFIX):
        checkpoint_id, kind = parse_attempt_object(meta.key)
        kinds = found.setdefault(checkpoint_id, {})
        kinds[kind] = kinds.get(kind, 0) + 1
    return found


async def checkpoint(cluster: Cluster, *, deadline_s: float = 20.0) -> CheckpointResult:
    return await cluster.leader(cluster.fence, None, deadline=cluster.deadline(deadline_s))


class NoRetention:
    """Stands in for the leader's retention walk, to build a backlog."""

    walked_below = 0  # it handles no attempt

    async def step(
        self, newest_committed: int, keep: frozenset[str] = frozenset(), *, max_deletes: int
    ) -> RetentionStep:
        return RetentionStep(0, 0, caught_up=False)


def test_dc13_retention_keeps_only_the_sink_data_of_older_commits(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        participants = {n: cluster.participant(cluster.host(n)) for n in (1, 2, 3)}
        async with cluster.running([participants[1], participants[2]]):
            aborted = await checkpoint(cluster, deadline_s=1.0)  # node 3 is missing
        assert not aborted.success
        async with cluster.running(list(participants.values())):
            results = [await checkpoint(cluster) for _ in range(3)]
        assert all(r.success for r in results), [r.error for r in results]
        one, two, three = (r.checkpoint_id for r in results)
        assert (await kept(cluster)) == {one: SINK_DATA, two: SINK_DATA, three: EVERYTHING}
        assert cluster.leader.last is not None and cluster.leader.last.deleted == 1 + 3
        outcome = await cluster_outcome(cluster.authority, one - 1)
        assert outcome is not None and not outcome.is_commit()  # the attempt deleted entirely
        committed = await read_committed_output(
            cluster.authority, lambda data: [data], deadline=cluster.deadline()
        )
        assert committed.attempts == (one, two, three) and committed.hidden == ()
        assert committed.records == [
            f"out-{n}-{a}".encode() for a in (one, two, three) for n in (1, 2, 3)
        ]

    run(url, body)


def test_dc13_the_handoff_pin_checkpoint_keeps_its_state(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        pinned: list[int | None] = [None]

        async def pin() -> int | None:
            return pinned[0]

        leader = cluster.leader
        leader.upkeep.retention = AttemptRetention(cluster.store, cluster.authority, pinned=pin)
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            first = await checkpoint(cluster)
            pinned[0] = first.checkpoint_id
            later = [await checkpoint(cluster) for _ in range(2)]
            found = await kept(cluster)
            assert all(kinds == EVERYTHING for kinds in found.values())  # the walk waits there
            pinned[0] = None  # the pin is consumed
            last = await checkpoint(cluster)
        ids = [first.checkpoint_id, *(r.checkpoint_id for r in later)]
        assert (await kept(cluster)) == {
            **dict.fromkeys(ids, SINK_DATA),
            last.checkpoint_id: EVERYTHING,
        }

    run(url, body)


def test_dc13_retention_deletes_at_most_its_budget_per_step(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        leader = cluster.leader
        leader.upkeep.retention = NoRetention()  # type: ignore[assignment]
        participants = {n: cluster.participant(cluster.host(n)) for n in (1, 2, 3)}
        async with cluster.running(list(participants.values())):
            results = [await checkpoint(cluster) for _ in range(4)]
        async with cluster.running([participants[1], participants[2]]):
            assert not (await checkpoint(cluster, deadline_s=1.0)).success
        async with cluster.running(list(participants.values())):
            newest = await checkpoint(cluster)
        ids = [r.checkpoint_id for r in results]
        before = await kept(cluster)
        aborted = [a for a in before if a not in ids and a != newest.checkpoint_id]
        assert len(aborted) == 1
        # The commits' prepares and state objects, and every object of the Abort (node 3
        # answered its prepare late, after the Abort: its objects are there too).
        backlog = 4 * (1 + 3) + sum(before[aborted[0]].values())
        retention = AttemptRetention(cluster.store, cluster.authority)
        steps = []
        for _ in range(20):
            step = await retention.step(newest.checkpoint_id, max_deletes=7)
            assert step.deleted <= 7
            steps.append(step)
            if step.caught_up:
                break
        assert sum(s.deleted for s in steps) == backlog and steps[-1].caught_up
        assert (await kept(cluster)) == {
            **dict.fromkeys(ids, SINK_DATA),
            newest.checkpoint_id: EVERYTHING,
        }
        assert (await retention.step(newest.checkpoint_id, max_deletes=7)).deleted == 0

    run(url, body)
