"""The leader's artifact floor upkeep (DC-14, coordinator/artifact_floor.py): with a small
live-Commit bound (the authority's `live_commit_links_max`) and a small policy, checkpoints go on
well past the bound, committed output stays exactly-once and readable, and the floor never
passes the handoff pin, a Commit whose sink commit marker is not read back, or the retention
walk."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    new_recovery_decision,
    record_assignment_recovery_decision,
)
from laminar_cluster.authority.cluster_outcomes import (
    cluster_outcome_retention_boundary,
    cluster_outcome_with_recovery_capsule,
    cluster_outcomes,
    highest_cluster_committed_outcome,
    prune_cluster_outcomes_before,
)
from laminar_cluster.checkpoint.records import CheckpointOutcome, CheckpointVerdict
from laminar_cluster.coordinator.artifact_floor import (
    ArtifactFloorKeeper,
    ArtifactFloorPolicy,
    FloorBounds,
    FloorTarget,
    HeldBy,
    floor_target,
)
from laminar_cluster.coordinator.host import Cut
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.coordinator.objects import encode_record
from laminar_cluster.coordinator.paths import sink_commit_path
from laminar_cluster.coordinator.records import CheckpointPrepare, SinkCommit
from laminar_cluster.coordinator.restore import load_cuts
from laminar_cluster.coordinator.sink_commits import read_sink_commit
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import (
    AssignmentSnapshotRef,
    ProcessLease,
    ProcessLeaseFence,
)
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.runtime import output as output_module
from laminar_cluster.runtime.output import (
    CommittedOutput,
    committed_checkpoints,
    encode_aggregate_records,
    read_committed_output,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.assignment.snapshot_support import participant, snapshot
from tests.authority.assignment_support import FakeSnapshots
from tests.cli.test_commands import COMMAND
from tests.coordinator.support import POLL_S, Cluster, FakeHost, expected_cut, make_cluster

SMALL = ArtifactFloorPolicy(retained_commits=2, trigger_commits=4)
BOUND = 6  # the authority's live Commit bound in these tests (the authority's own is 4,096)
NO_WALK_BOUND = 10**9  # a retention walk that handled everything


def run(url: str, body: Callable[[Cluster], Awaitable[None]], **options: object) -> None:
    async def main() -> None:
        await body(await make_cluster(url, **options))  # type: ignore[arg-type]

    asyncio.run(main())


async def checkpoint(cluster: Cluster) -> CheckpointResult:
    return await cluster.leader(cluster.fence, None, deadline=cluster.deadline())


async def committed_output(cluster: Cluster) -> CommittedOutput[bytes]:
    """What a separate reader process sees (its own store client and authority)."""
    _, _, authority = cluster.client()
    return await read_committed_output(authority, lambda data: [data], deadline=cluster.deadline())


def outputs_of(ids: list[int]) -> list[bytes]:
    return [f"out-{n}-{a}".encode() for a in ids for n in (1, 2, 3)]


async def live_commit_ids(cluster: Cluster) -> list[int]:
    return [o.checkpoint_id for o in await cluster_outcomes(cluster.authority) if o.is_commit()]


def keeper(cluster: Cluster, walked_below: int = NO_WALK_BOUND) -> ArtifactFloorKeeper:
    return ArtifactFloorKeeper(
        cluster.store,
        cluster.decisions,
        cluster.authority,
        SMALL,
        walked_below=lambda: walked_below,
    )


def test_dc14_floor_target_is_the_lowest_bound() -> None:
    free = FloorBounds(pinned_epoch=None, marked_below=100, walked_below=100)
    epochs = [3, 5, 6, 9]
    assert floor_target(epochs[:3], 0, SMALL, free) is None  # below the trigger
    assert floor_target(epochs, 0, SMALL, free) == FloorTarget(6, HeldBy.RETAINED)
    pinned = dataclasses.replace(free, pinned_epoch=5)
    assert floor_target(epochs, 0, SMALL, pinned) == FloorTarget(5, HeldBy.PIN)
    for bounds, held in [
        (FloorBounds(pinned_epoch=None, marked_below=4, walked_below=100), HeldBy.MARKERS),
        (FloorBounds(pinned_epoch=None, marked_below=100, walked_below=3), HeldBy.RETENTION),
        (FloorBounds(pinned_epoch=9, marked_below=100, walked_below=100), HeldBy.RETAINED),
    ]:
        found = floor_target(epochs, 0, SMALL, bounds)
        assert found is not None and found.held_by is held
        assert found.before_epoch == min(6, bounds.marked_below, bounds.walked_below)
    # A bound at or below the floor in force: the target does not move it.
    found = floor_target([6, 7, 8, 9], 6, SMALL, FloorBounds(None, 5, 100))
    assert found == FloorTarget(5, HeldBy.MARKERS)


def test_dc14_policy_and_bound_are_checked() -> None:
    for kept, trigger in [(0, 4), (4, 4), (5, 4), (1, 4_097)]:
        with pytest.raises(InvalidArgument):
            ArtifactFloorPolicy(retained_commits=kept, trigger_commits=trigger)
    with pytest.raises(InvalidArgument):
        ArtifactFloorPolicy(markers_per_step_max=0)

    async def body(cluster: Cluster) -> None:
        policy = ArtifactFloorPolicy(retained_commits=2, trigger_commits=BOUND + 1)
        with pytest.raises(InvalidArgument, match="Commits would stop first"):
            ArtifactFloorKeeper(
                cluster.store, cluster.decisions, cluster.authority, policy, walked_below=int
            )

    run("memory://", body, live_commits_max=BOUND, floor_policy=None)


def test_dc14_without_the_floor_upkeep_commits_stop_at_the_live_commit_bound(url: str) -> None:
    """The failure DC-14 prevents: with the floor never moved, Commit BOUND + 1 is refused and
    the leader records Abort instead (its own 4,096 at one per second: 68 minutes)."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            for _ in range(BOUND):
                result = await checkpoint(cluster)
                assert result.success, result.error
            refused = await checkpoint(cluster)
        assert not refused.success and "advance the artifact-retention" in str(refused.error)
        assert cluster.leader.last is not None
        assert cluster.leader.last.verdict is CheckpointVerdict.ABORT
        assert len(await live_commit_ids(cluster)) == BOUND

    run(url, body, live_commits_max=BOUND, floor_policy=None)


def test_dc14_commits_continue_past_the_live_commit_bound(url: str) -> None:
    """30 checkpoints, five times the bound of 6 live Commits: every one commits, the live
    Commits never exceed the trigger (4), and every committed output is read exactly once, by
    another client, after the floor passed all but the newest; the newest restores."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        ids: list[int] = []
        floors: list[int] = []
        async with cluster.running(participants):
            for _ in range(5 * BOUND):
                result = await checkpoint(cluster)
                assert result.success, result.error
                ids.append(result.checkpoint_id)
                live = await live_commit_ids(cluster)
                assert len(live) < SMALL.trigger_commits and live[-1] == ids[-1]
                stats = cluster.leader.last
                assert stats is not None and stats.artifact_floor is not None
                floors.append(stats.artifact_floor)
        assert floors == sorted(floors) and floors[-1] > ids[-SMALL.trigger_commits]
        boundary = await cluster_outcome_retention_boundary(cluster.authority)
        assert boundary.artifact_before_epoch == floors[-1]
        result = await committed_output(cluster)
        assert result.attempts == tuple(ids)  # each committed attempt once, none lost
        assert result.records == outputs_of(ids) and result.hidden == ()
        assert await committed_checkpoints(cluster.authority) == tuple(ids)
        newest = await highest_cluster_committed_outcome(cluster.authority)
        assert newest is not None and newest.checkpoint_id == ids[-1]
        assert newest.recovery_capsule is not None
        cuts = await load_cuts(
            cluster.store,
            cluster.decisions,
            newest.recovery_capsule,
            range(len(cluster.owners)),
            deadline=cluster.deadline(),
        )
        for node in (1, 2, 3):
            want = expected_cut(node, cluster.vnodes_of(node), ids[-1]).vnodes
            assert {v: cuts[v] for v in want} == want

    run(url, body, live_commits_max=BOUND, floor_policy=SMALL)


def test_dc14_the_floor_never_passes_the_handoff_pin(url: str) -> None:
    """A recovery decision pins the second of six Commits: the floor stops at it, and the
    authority still answers for it with its capsule."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            ids = [(await checkpoint(cluster)).checkpoint_id for _ in range(6)]
        pinned = await _pin_by_recovery(cluster, ids[1])
        step = await keeper(cluster).step(cluster.proof, deadline=cluster.deadline())
        assert step.advanced
        assert step.target == FloorTarget(pinned.epoch, HeldBy.PIN)
        assert step.artifact_before_epoch == pinned.epoch
        found = await cluster_outcome_with_recovery_capsule(cluster.authority, pinned.epoch)
        assert found is not None and found[0] == pinned
        again = await keeper(cluster).step(cluster.proof, deadline=cluster.deadline())
        assert not again.advanced  # held there while the pin is active
        result = await committed_output(cluster)
        assert result.attempts == tuple(ids) and result.records == outputs_of(ids)

    run(url, body, floor_policy=None)


def test_dc14_the_floor_waits_for_sink_commit_markers(url: str) -> None:
    """The marker of the second of five Commits is missing: the first step writes it and stops
    there; the next reads it back and moves on. A marker that disagrees with its Commit stops
    the floor (CorruptRecord) instead of hiding the Commit from the reader."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            ids = [(await checkpoint(cluster)).checkpoint_id for _ in range(6)]
        await cluster.store.delete(sink_commit_path(ids[1]))
        marker = await read_sink_commit(cluster.store, ids[2])
        assert marker is not None
        wrong = msgspec.structs.replace(
            marker, fence=snapshot_fence(snapshot(7, list(cluster.owners)))
        )
        key = sink_commit_path(ids[2])
        await cluster.store.put(key, encode_record(wrong, key=key), OVERWRITE)
        floor = keeper(cluster)
        first = await floor.step(cluster.proof, deadline=cluster.deadline())
        assert first.markers_written == 1
        assert first.target == FloorTarget(ids[1], HeldBy.MARKERS)
        assert await read_sink_commit(cluster.store, ids[1]) is not None
        with pytest.raises(CorruptRecord, match="differs from its live Commit"):
            await floor.step(cluster.proof, deadline=cluster.deadline())
        boundary = await cluster_outcome_retention_boundary(cluster.authority)
        assert boundary.artifact_before_epoch == ids[1]
        await cluster.store.put(key, encode_record(marker, key=key), OVERWRITE)
        last = await floor.step(cluster.proof, deadline=cluster.deadline())
        assert last.target == FloorTarget(ids[-2], HeldBy.RETAINED)
        assert last.advanced and await live_commit_ids(cluster) == ids[-2:]
        result = await committed_output(cluster)
        assert result.attempts == tuple(ids) and result.records == outputs_of(ids)

    run(url, body, floor_policy=None)


def test_dc14_the_floor_waits_for_the_retention_walk(url: str) -> None:
    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            ids = [(await checkpoint(cluster)).checkpoint_id for _ in range(4)]
        step = await keeper(cluster, walked_below=ids[1]).step(
            cluster.proof, deadline=cluster.deadline()
        )
        assert step.advanced
        assert step.target == FloorTarget(ids[1], HeldBy.RETENTION)
        assert await live_commit_ids(cluster) == ids[1:]  # not ids[2:], as kept alone would

    run(url, body, floor_policy=None)


async def _pin_by_recovery(cluster: Cluster, checkpoint_id: int) -> CheckpointOutcome:
    """Record a recovery decision (node 2 replaced by another boot) whose recovery checkpoint is
    the Commit `checkpoint_id`; that Commit."""
    found = await cluster_outcome_with_recovery_capsule(cluster.authority, checkpoint_id)
    assert found is not None and found[0].recovery_capsule is not None
    outcome = found[0]
    target = snapshot_fence(snapshot(2, list(cluster.owners), boots={2: 99}))
    old, new = participant(2), participant(2, 99)
    decision = new_recovery_decision(
        cluster.fence,
        target,
        AssignmentSnapshotRef(version=2, sha256="02" * 32, encoded_len=100),
        [
            ProcessLeaseFence(
                predecessor=ProcessLease(
                    node=2, owner=old.boot_incarnation, term=4, seq=10, expires_at_ms=0
                ),
                successor=ProcessLease(
                    node=2, owner=new.boot_incarnation, term=5, seq=11, expires_at_ms=0
                ),
            )
        ],
        outcome.recovery_capsule,
        cluster.proof,
    )
    snapshots = FakeSnapshots(current=(cluster.fence, False))
    snapshots.stage(decision)
    recorded = await record_assignment_recovery_decision(
        cluster.authority, cluster.proof, decision, snapshots, deadline=cluster.deadline()
    )
    assert recorded == DecisionCreated(decision)
    return outcome


@dataclass
class AggregateHost(FakeHost):
    """Cuts as FakeHost, with the reference aggregation's output: key = node, one event whose
    value is the checkpoint ID (so totals tell a lost or doubled attempt apart)."""

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        cut = await super().cut(prepare, deadline=deadline)
        records = [(self.me.node_id, 1, prepare.attempt.checkpoint_id)]
        return Cut(vnodes=cut.vnodes, output=encode_aggregate_records(records))


def test_dc14_output_and_status_commands_after_the_floor_moved(tmp_path: Path) -> None:
    """A user's view, in separate processes on the file store: `laminar-cluster output` counts
    every committed event exactly once and `status` shows the newest Commit, after 15
    checkpoints against a bound of 6 live Commits."""
    url = f"file://{tmp_path / 'store'}"

    async def main() -> list[int]:
        cluster = await make_cluster(url, live_commits_max=BOUND, floor_policy=SMALL)
        hosts = []
        for node in (1, 2, 3):
            me = participant(node)
            host = AggregateHost(me, cluster.fence, cluster.vnodes_of(node))
            cluster.hosts[node] = host
            hosts.append(cluster.participant(host))
        async with cluster.running(hosts):
            ids = []
            for _ in range(15):
                result = await checkpoint(cluster)
                assert result.success, result.error
                ids.append(result.checkpoint_id)
        boundary = await cluster_outcome_retention_boundary(cluster.authority)
        assert boundary.artifact_before_epoch > ids[-SMALL.trigger_commits]
        return ids

    ids = asyncio.run(main())
    shown = _command("output", "--store", url, "--json")
    assert shown.returncode == 0, shown.stderr
    figures = json.loads(shown.stdout)
    assert (figures["events"], figures["keys"], figures["sum"]) == (3 * len(ids), 3, 3 * sum(ids))
    assert (figures["attempts"], figures["last_attempt"], figures["hidden"]) == (
        len(ids),
        ids[-1],
        [],
    )
    status = _command("status", "--store", url, "--json")
    view = json.loads(status.stdout)
    assert view["checkpoint"]["checkpoint_id"] == ids[-1], status.stdout + status.stderr


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_dc14_the_reader_lists_again_when_the_floor_moved_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The marker of the first Commit is written after the reader listed the markers, and the
    floor then passes that Commit before the reader reads the outcomes: without a second
    listing the Commit would be neither listed nor live, and its output lost to the reader."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            ids = [(await checkpoint(cluster)).checkpoint_id for _ in range(4)]
        marker = await read_sink_commit(cluster.store, ids[0])
        assert marker is not None
        await cluster.store.delete(sink_commit_path(ids[0]))
        listed = output_module._sink_commits
        listings = []

        async def listing_then_floor(
            store: ObjectStore,
        ) -> tuple[list[SinkCommit], dict[int, set[int]]]:
            found = await listed(store)
            listings.append([c.attempt.checkpoint_id for c in found[0]])
            if len(listings) == 1:  # the leader repairs the marker, then moves the floor
                key = sink_commit_path(ids[0])
                await cluster.store.put(key, encode_record(marker, key=key), CREATE)
                await prune_cluster_outcomes_before(
                    cluster.authority, cluster.proof, ids[1], no_check, deadline=cluster.deadline()
                )
            return found

        monkeypatch.setattr(output_module, "_sink_commits", listing_then_floor)
        result = await committed_output(cluster)
        assert listings == [ids[1:], ids]
        assert result.attempts == tuple(ids) and result.records == outputs_of(ids)

    run("memory://", body, floor_policy=None)


async def no_check(_: CheckpointOutcome) -> None:
    return None


def test_dc14_a_new_leader_instance_keeps_the_floor_moving(url: str) -> None:
    """DC-14's state is in memory (the markers read, the retention walk's position): a new
    `ClusterCheckpointer` (a leader restarted in the same term, or the next one) starts from
    nothing, reads the markers again and walks again, and Commits still go past the bound."""

    async def body(cluster: Cluster) -> None:
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        ids: list[int] = []
        async with cluster.running(participants):
            for round_ in range(2):
                if round_:
                    cluster.leader = ClusterCheckpointer(
                        cluster.decisions,
                        cluster.authority,
                        proof=lambda: cluster.proof,
                        owners_of=lambda f: cluster.owners if f == cluster.fence else None,
                        poll_s=POLL_S,
                        abort_reserve_s=0.5,
                        floor_policy=SMALL,
                    )
                for _ in range(BOUND + 2):
                    result = await checkpoint(cluster)
                    assert result.success, result.error
                    ids.append(result.checkpoint_id)
        floor = cluster.leader.upkeep.floor
        assert floor is not None and floor.verified_below > ids[BOUND + 2]  # read again
        assert len(await live_commit_ids(cluster)) < SMALL.trigger_commits
        result = await committed_output(cluster)
        assert result.attempts == tuple(ids) and result.records == outputs_of(ids)

    run(url, body, live_commits_max=BOUND, floor_policy=SMALL)
