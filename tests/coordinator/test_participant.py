"""`CheckpointParticipant` (docs/protocols/distributed-checkpoint.md, participant steps):
prepares of another fence or another boot are ignored (P3), the manifest is written last and the
host resolved only on a durable decision (DC-6), an attempt stays in doubt without one, a newer
leader term closes a pending attempt (DC-8), and a restarted node resolves the attempt its
previous boot acked before anything else (DC-9).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointAttempt, CheckpointVerdict
from laminar_cluster.coordinator.host import Cut
from laminar_cluster.coordinator.participant import (
    CheckpointParticipant,
    Idle,
    Ignored,
    InDoubt,
    Refused,
    Resolved,
)
from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX, manifest_path
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import InvalidArgument, ObjectNotFound
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.metrics import NodeMetrics
from tests.assignment.snapshot_support import participant, snapshot
from tests.coordinator.support import (
    Cluster,
    FakeHost,
    make_cluster,
    point_at_verdict,
    write_prepare,
)


def run(url: str, body: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        await body(await make_cluster(url))

    asyncio.run(main())


async def abort(
    cluster: Cluster, attempt: CheckpointAttempt, proof: LeaderProof, *, point: bool = True
) -> None:
    """Record Abort as the leader does: the outcome, then (unless `point` is False: a lost
    pointer write) the pointer's verdict."""
    await record_cluster_outcome(
        cluster.authority,
        proof,
        epoch=attempt.epoch,
        checkpoint_id=attempt.checkpoint_id,
        assignment_fence=cluster.fence,
        verdict=CheckpointVerdict.ABORT,
        recovery_capsule=None,
        deadline=cluster.deadline(),
    )
    if point:
        await point_at_verdict(cluster, attempt, CheckpointVerdict.ABORT)


async def exists(cluster: Cluster, key: str) -> bool:
    try:
        await cluster.store.head(key)
    except ObjectNotFound:
        return False
    return True


def test_dc5_a_prepare_for_another_fence_is_ignored(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        host = cluster.host(2)
        host.fence = snapshot_fence(snapshot(2, [1, 2, 2, 2, 2, 2, 3, 3]))  # runs another fence
        p = cluster.participant(host, decision_timeout_s=0.2)
        assert isinstance(await p.step(), Idle)
        attempt = await write_prepare(cluster)
        outcome = await p.step()
        assert isinstance(outcome, Ignored) and "does not run fence v1" in outcome.reason
        assert host.cuts == [] and not await exists(cluster, manifest_path(attempt.epoch, 2))
        # A node of the fence with another boot (a restarted process) ignores it too.
        other = cluster.host(3, boot=4_242)
        other.fence = cluster.fence
        outcome = await cluster.participant(other).step()
        assert isinstance(outcome, Ignored) and "does not name node 3" in outcome.reason
        assert other.cuts == []
        # Once the host runs the fence, the same prepare is answered (still undecided).
        host.fence = cluster.fence
        assert await p.step() == InDoubt(attempt)  # checked undecided first: it is not fresh
        assert host.cuts == [attempt] and await exists(cluster, manifest_path(attempt.epoch, 2))

    run(url, body)


def test_dc6_without_a_decision_the_attempt_stays_in_doubt(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        attempt = await write_prepare(cluster)
        assert await p.step() == InDoubt(attempt)  # DC-6: acked; no outcome, no resolution
        assert host.cuts == [attempt] and host.resolutions == []
        assert p.pending == attempt
        assert await p.step() == InDoubt(attempt)
        await abort(cluster, attempt, cluster.proof)
        assert await p.step() == Resolved(attempt, False)
        assert host.resolutions == [(attempt, False)] and p.pending is None
        assert isinstance(await p.step(), Idle)  # the decided attempt is not answered again

    run(url, body)


def test_dc8_a_newer_leader_term_closes_the_pending_attempt(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        old = await write_prepare(cluster)
        assert await p.step() == InDoubt(old)
        # The leader begins a new term (another token): the old term can append nothing more.
        owner = LeaderLeaseOwner(node=1, boot=participant(1).boot_incarnation, process_term=1)
        began = await cluster.authority.begin_new_term(owner, deadline=cluster.deadline())
        assert isinstance(began, Acquired)
        newer_proof = began.lease.proof()
        assert newer_proof.fencing_token > cluster.proof.fencing_token
        new = await write_prepare(cluster, newer_proof)
        assert await p.step() == Resolved(old, False)  # DC-8
        assert await p.step() == InDoubt(new)  # then the newer prepare is answered
        assert host.cuts == [old, new]

    run(url, body)


def test_dc6_a_same_term_newer_prepare_waits_for_the_outcome(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        old = await write_prepare(cluster)
        assert await p.step() == InDoubt(old)
        await write_prepare(cluster)  # same term: it proves nothing about `old` by itself
        assert await p.step() == InDoubt(old)
        await abort(cluster, old, cluster.proof)
        assert await p.step() == Resolved(old, False)

    run(url, body)


def test_dc9_a_restarted_participant_resolves_its_last_attempt_first(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        # Node 2 (first boot) acks and dies before the outcome; node 3 is down, so the leader
        # records Abort at its deadline. Node 2 restarts (another boot) before that.
        first = cluster.host(2, block_resolve=True)
        dead = cluster.participant(first)
        survivors = [cluster.participant(cluster.host(1))]

        async def crash_after_ack() -> None:
            async with asyncio.TaskGroup() as group:
                task = group.create_task(dead.run(asyncio.Event()))
                for _ in range(4_000):
                    listed = await cluster.store.list(ATTEMPTS_PREFIX)
                    if any(
                        m.key.endswith("manifest/node=00000000000000000002.json") for m in listed
                    ):
                        break
                    await asyncio.sleep(0.005)
                task.cancel()

        async with cluster.running(survivors), asyncio.TaskGroup() as group:
            leader = group.create_task(
                cluster.leader(cluster.fence, None, deadline=cluster.deadline(5.0))
            )
            await crash_after_ack()
            attempt = dead.pending
            assert attempt is not None and first.resolutions == []
            restarted = cluster.host(2, boot=7_777)  # runs no fence yet
            again = cluster.participant(restarted)
            outcome = await again.step()  # DC-9: waits for the pending attempt's decision
        assert not leader.result().success
        assert outcome == Resolved(attempt, False)
        assert restarted.resolutions == [(attempt, False)] and restarted.cuts == []

    run(url, body)


def test_dc9_a_restarted_participant_learns_a_commit(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        first = cluster.host(2, block_resolve=True)  # dies after the Commit, before resolving
        dead = cluster.participant(first)
        others = [cluster.participant(cluster.host(n)) for n in (1, 3)]
        async with cluster.running(others), asyncio.TaskGroup() as group:
            step = group.create_task(dead.run(asyncio.Event()))
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
            step.cancel()
        assert result.success, result.error
        attempt = CheckpointAttempt.canonical(result.checkpoint_id)
        restarted = cluster.host(2, boot=7_777)
        assert await cluster.participant(restarted).step() == Resolved(attempt, True)
        assert restarted.resolutions == [(attempt, True)]
        # A node that never acked anything resolves nothing.
        fresh = cluster.host(4, boot=9_999)
        assert isinstance(await cluster.participant(fresh).step(), Ignored)
        assert fresh.resolutions == []

    run(url, body)


class BuggyHost(FakeHost):
    """A host whose cut fails with an exception that is not a LaminarError: a bug."""

    bug = ZeroDivisionError("the engine divided by zero")

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        raise self.bug


def test_an_engine_bug_is_logged_with_its_traceback_counted_and_aborts(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(cluster: Cluster) -> None:
        good = cluster.host(2)
        host = BuggyHost(good.me, good.fence, good.vnodes)
        metrics = NodeMetrics()
        store, _, authority = cluster.client()
        p = CheckpointParticipant(
            store,
            cluster.clock,
            authority,
            host,
            0.01,
            decision_timeout_s=0.2,
            on_engine_bug=metrics.engine_bug,
        )
        attempt = await write_prepare(cluster)
        with caplog.at_level(logging.INFO, logger="laminar_cluster.coordinator.participant"):
            outcome = await p.step()
        assert isinstance(outcome, Refused) and outcome.attempt == attempt
        assert host.resolutions == [(attempt, False)]  # still aborted at once
        assert not await exists(cluster, manifest_path(attempt.epoch, 2))
        assert p.engine_bugs == 1
        assert metrics.value("laminar_engine_bugs_total") == 1
        bugs = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(bugs) == 1 and bugs[0].exc_info is not None
        assert bugs[0].exc_info[1] is BuggyHost.bug  # logged with its traceback

    run(url, body)


def test_a_refusal_is_no_bug(url: str, caplog: pytest.LogCaptureFixture) -> None:
    async def body(cluster: Cluster) -> None:
        host = cluster.host(2, refuse=True)  # refuses with errors.Refused
        metrics = NodeMetrics()
        store, _, authority = cluster.client()
        p = CheckpointParticipant(
            store, cluster.clock, authority, host, 0.01, on_engine_bug=metrics.engine_bug
        )
        attempt = await write_prepare(cluster)
        with caplog.at_level(logging.INFO, logger="laminar_cluster.coordinator.participant"):
            outcome = await p.step()
        assert isinstance(outcome, Refused) and host.resolutions == [(attempt, False)]
        assert p.engine_bugs == 0 and metrics.value("laminar_engine_bugs_total") == 0
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    run(url, body)


def test_non_positive_timings_are_invalid(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        store, _, authority = cluster.client()
        for poll_s, prepare_s, decision_s in ((0.0, 1.0, 1.0), (0.1, 0.0, 1.0), (0.1, 1.0, -1.0)):
            with pytest.raises(InvalidArgument):
                CheckpointParticipant(
                    store,
                    cluster.clock,
                    authority,
                    cluster.host(2),
                    poll_s,
                    prepare_timeout_s=prepare_s,
                    decision_timeout_s=decision_s,
                )

    run(url, body)
