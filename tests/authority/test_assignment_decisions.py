"""Assignment decisions through the authority log (LA §3.6, LA §4.5; LA-T64 to
LA-T69 and the LA-15 rules; invariants LA-5, LA-15).

LA-T64 runs on memory, file and the S3 test server, the rest on memory and file. Races go
through PausingStore; the assignment snapshot store (a higher layer) is the in-memory fake of
`assignment_support`. Takeovers advance a SimulatedClock, never sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from laminar_cluster.authority.assignment_decisions import (
    DecisionConflict,
    DecisionCreated,
    DecisionUnchanged,
    assignment_drain_decision,
    assignment_recovery_decision,
    materialize_assignment_recovery,
    new_drain_decision,
)
from laminar_cluster.errors import CorruptRecord, Fenced, InvalidArgument, Refused, StoreUnavailable
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import AssignmentDrainDecision, AuthorityAssignmentDecisionFloor
from laminar_cluster.store import ObjectStore
from tests.authority.assignment_support import (
    ABORT,
    COMMIT,
    LOCAL,
    FakeSnapshots,
    cref,
    drain,
    fence,
    head_of,
    leader,
    link,
    live_versions,
    pfence,
    prune,
    rec_drain,
    rec_recovery,
    recovery,
    replace,
    successor,
    transition,
)
from tests.lease.pausing_store import B, PausingStore, acquired, begin


def test_la_t64_drain_commit_vs_abort_race(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        auth, proof = await leader(paused)
        commit, abort = drain(2, proof), drain(2, proof, ABORT)
        gate = paused.pause_put(record_path(2), count=2)
        async with asyncio.TaskGroup() as group:
            racing = [group.create_task(rec_drain(auth, proof, d)) for d in (commit, abort)]
            await gate.wait_reached()  # both hold a Create of seq 2
            gate.release.set()
        results = [task.result() for task in racing]
        created = [r for r in results if isinstance(r, DecisionCreated)]
        conflicts = [r for r in results if isinstance(r, DecisionConflict)]
        assert len(created) == 1 and len(conflicts) == 1
        winner = created[0].decision
        assert conflicts[0].winner == winner
        loser = abort if winner == commit else commit
        assert await rec_drain(auth, proof, winner) == DecisionUnchanged(winner)
        assert await rec_drain(auth, proof, loser) == DecisionConflict(winner)
        assert await assignment_drain_decision(auth, 2) == winner
        assert await live_versions(auth) == [(2, 2)]  # LA-15: one decision for version 2

    asyncio.run(main())


@LOCAL
def test_la_t65_successor_can_abort_not_commit(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        incumbent, old_proof = await leader(make_store())
        rival, proof = await successor(make_store(), incumbent)
        opened = transition(2, old_proof)  # opened by the deposed term
        # LA-15: a replacement term can never Commit its predecessor's transition.
        with pytest.raises(
            InvalidArgument, match=r"a Commit requires leader_proof == transition\.leader"
        ):
            new_drain_decision(opened, proof, COMMIT, cref(2))
        forged = AssignmentDrainDecision(
            transition=opened, leader_proof=proof, verdict=COMMIT, handoff_checkpoint=cref(2)
        )
        with pytest.raises(InvalidArgument, match="a Commit requires leader_proof"):
            await rec_drain(rival, proof, forged)
        with pytest.raises(Fenced):  # LA-5: the deposed term cannot settle it any more
            await rec_drain(incumbent, old_proof, drain(2, old_proof))
        assert await live_versions(rival) == []
        abort = new_drain_decision(opened, proof, ABORT)
        assert await rec_drain(rival, proof, abort) == DecisionCreated(abort)
        assert await assignment_drain_decision(incumbent, 2) == abort
        assert await live_versions(incumbent) == [(3, 2)]  # seq 2 is the takeover

    asyncio.run(main())


@LOCAL
def test_la_t66_recovery_requires_exact_removed_fences(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        auth, proof = await leader(make_store())
        good = recovery(2, proof, removed=(2, 3))
        snaps = FakeSnapshots(current=(fence(1), False))
        snaps.stage(good)
        first, second = good.removed_process_fences
        bad_fences = {
            "requires the exact removed predecessor process set": (first,),
            "process fences are incomplete, unsorted, or unrelated: fence 0": (second, first),
            r"fence 1: .* to \(seq 12, term 5\), not \+1 each": (first, pfence(3, next_seq=12)),
        }
        for message, fences in bad_fences.items():
            with pytest.raises(InvalidArgument, match=message):
                await rec_recovery(auth, proof, replace(good, removed_process_fences=fences), snaps)
        # LA-15: the live predecessor and the staged proposal must match the decision exactly.
        snapshot_cases: list[tuple[str, Any]] = [
            ("not the exact committed assignment head", (fence(1, salt=5), False)),
            ("not the exact committed assignment head", (fence(1), True)),  # draining
            ("requires a durable predecessor snapshot", None),
        ]
        for message, current in snapshot_cases:
            snaps.current = current
            with pytest.raises(InvalidArgument, match=message):
                await rec_recovery(auth, proof, good, snaps)
        snaps.current = (fence(1), False)
        snaps.proposals[good.proposal.sha256] = fence(2, (1,), salt=9)  # wrong target digest
        with pytest.raises(InvalidArgument, match="does not match its authorized target fence"):
            await rec_recovery(auth, proof, good, snaps)
        assert (await head_of(auth)).lease.seq == 1  # nothing was appended
        snaps.stage(good)
        assert await rec_recovery(auth, proof, good, snaps) == DecisionCreated(good)
        snaps.current = (fence(2, (1,)), False)  # installed: a retry no longer needs the preflight
        assert await rec_recovery(auth, proof, good, snaps) == DecisionUnchanged(good)
        other = recovery(2, proof, removed=(2,))
        assert await rec_recovery(auth, proof, other, snaps) == DecisionConflict(good)
        assert await live_versions(auth) == [(2, 2)]

    asyncio.run(main())


@LOCAL
def test_recovery_snapshot_errors_are_mapped(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        auth, proof = await leader(make_store())
        decision = recovery(2, proof)
        snaps = FakeSnapshots(error=StoreUnavailable("disk gone"))
        with pytest.raises(
            StoreUnavailable, match="load assignment recovery predecessor: disk gone"
        ):
            await rec_recovery(auth, proof, decision, snaps)
        snaps.error = CorruptRecord("torn snapshot", key="assignment/current")
        with pytest.raises(CorruptRecord, match="predecessor: torn snapshot") as caught:
            await rec_recovery(auth, proof, decision, snaps)
        assert caught.value.key == "assignment/current"
        snaps.error, snaps.current = None, (fence(1), False)  # the proposal was never staged
        with pytest.raises(InvalidArgument, match="load assignment recovery proposal: proposal"):
            await rec_recovery(auth, proof, decision, snaps)
        assert await live_versions(auth) == []

    asyncio.run(main())


@LOCAL
def test_la_t67_drain_and_recovery_share_chain(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        auth, proof = await leader(make_store())
        snaps = FakeSnapshots(current=(fence(2), False))
        d2, r2, r3, d3 = drain(2, proof), recovery(2, proof), recovery(3, proof), drain(3, proof)
        snaps.stage(r3)
        assert await rec_drain(auth, proof, d2) == DecisionCreated(d2)
        with pytest.raises(
            Refused, match="assignment drain decision already settled target version 2"
        ):
            await rec_recovery(auth, proof, r2, snaps)  # LA-15: one decision per version, any kind
        assert await rec_recovery(auth, proof, r3, snaps) == DecisionCreated(r3)
        with pytest.raises(
            Refused, match="assignment recovery decision already settled target version 3"
        ):
            await rec_drain(auth, proof, d3)
        assert await assignment_drain_decision(auth, 2) == d2
        assert await assignment_recovery_decision(auth, 3) == r3
        with pytest.raises(Refused, match="target version 3 was settled by assignment recovery"):
            await assignment_drain_decision(auth, 3)
        with pytest.raises(Refused, match="target version 2 was settled by assignment drain"):
            await assignment_recovery_decision(auth, 2)
        assert await assignment_drain_decision(auth, 4) is None
        assert await prune(auth, proof, 3) == 3
        floor = (await head_of(auth)).assignment_decision_floor
        anchor_link = link(2, 2)
        assert floor == AuthorityAssignmentDecisionFloor(
            before_target_version=3, terminal_anchor=d2, terminal_anchor_link=anchor_link
        )
        with pytest.raises(Refused, match="version 2 is below durable retention floor 3"):
            await assignment_drain_decision(auth, 2)
        assert await assignment_recovery_decision(auth, 3) == r3
        assert await live_versions(auth) == [(3, 3)]

    asyncio.run(main())


@LOCAL
def test_la_t68_assignment_floor_compacts(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        auth, proof = await leader(paused)
        decisions = {v: drain(v, proof, COMMIT if v % 2 else ABORT) for v in range(2, 6)}
        for decision in decisions.values():  # versions 2..5 at sequences 2..5
            assert await rec_drain(auth, proof, decision) == DecisionCreated(decision)
        scheduled: list[int] = []
        auth.prune_hook = lambda: scheduled.append(1)
        assert await prune(auth, proof, 4) == 4
        floor = (await head_of(auth)).assignment_decision_floor
        assert floor is not None and floor.terminal_anchor == decisions[3]
        assert floor.terminal_anchor_link == link(3, 3)
        with pytest.raises(Refused, match="version 3 is below durable retention floor 4"):
            await assignment_drain_decision(auth, 3)
        with pytest.raises(Refused, match="below durable retention floor 4"):  # a stale v3 attempt
            await rec_drain(auth, proof, decisions[3])
        # The records of v2 and v3 are no longer read by any audit: the history prune may delete
        # them (simulated here), and every live read still succeeds.
        for seq in (1, 2, 3):
            await paused.inner.delete(record_path(seq))
        paused.reset_log()
        assert await assignment_drain_decision(auth, 5) == decisions[5]
        assert await assignment_drain_decision(auth, 4) == decisions[4]
        assert paused.count("get", record_path(2)) == paused.count("get", record_path(3)) == 0
        assert scheduled == [1]  # by the floor append
        seq = (await head_of(auth)).lease.seq
        assert await prune(auth, proof, 2) == 4  # floors only move forward: no write, ...
        assert scheduled == [1, 1]  # ... but a history prune is scheduled
        assert await prune(auth, proof, 0) == 4  # a plain read
        assert (await head_of(auth)).lease.seq == seq and scheduled == [1, 1]
        assert await prune(auth, proof, 6) == 6  # the anchor moves to v5, the head itself
        floor = (await head_of(auth)).assignment_decision_floor
        assert floor is not None and floor.terminal_anchor == decisions[5]
        assert await live_versions(auth) == []

    asyncio.run(main())


@LOCAL
def test_la_t69_takeover_fences_delayed_recovery_decision(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        paused = PausingStore(make_store())
        incumbent, proof = await leader(paused)
        snaps = FakeSnapshots(current=(fence(1), False))
        decision = recovery(2, proof)
        snaps.stage(decision)
        gate = paused.pause_put(record_path(2))
        with pytest.raises(ExceptionGroup) as failed:
            async with asyncio.TaskGroup() as group:
                group.create_task(rec_recovery(incumbent, proof, decision, snaps))
                await gate.wait_reached()
                rival, _ = await successor(make_store(), incumbent)  # wins seq 2
                gate.release.set()
        assert failed.group_contains(Fenced, match="newer leader term")  # LA-5
        assert await assignment_recovery_decision(rival, 2) is None
        assert (await head_of(rival)).lease.owner == B

    asyncio.run(main())


@LOCAL
def test_la_t69_materialize_only_admitted_proposal(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        auth, proof = await leader(make_store())
        decision = recovery(2, proof)
        snaps = FakeSnapshots(current=(fence(1), False))
        snaps.stage(decision)
        with pytest.raises(Refused, match="target 2 has no authority decision"):
            await materialize_assignment_recovery(auth, 2, snaps)
        assert await rec_recovery(auth, proof, decision, snaps) == DecisionCreated(decision)
        assert await materialize_assignment_recovery(auth, 2, snaps) == ("rotated", 2)
        assert snaps.materialized == [decision.proposal]  # LA-15: exactly the admitted proposal
        snaps.proposals[decision.proposal.sha256] = fence(2, (1, 2), salt=3)  # replaced content
        with pytest.raises(CorruptRecord, match="proposal does not match its target"):
            await materialize_assignment_recovery(auth, 2, snaps)
        assert await rec_drain(auth, proof, drain(3, proof)) == DecisionCreated(drain(3, proof))
        with pytest.raises(Refused, match="settled by assignment drain"):
            await materialize_assignment_recovery(auth, 3, snaps)
        with pytest.raises(InvalidArgument, match="must be nonzero"):
            await materialize_assignment_recovery(auth, 0, snaps)
        assert snaps.materialized == [decision.proposal]

    asyncio.run(main())


@LOCAL
def test_la15_only_the_opening_term_commits(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        auth, first = await leader(make_store())
        second = acquired(await begin(auth)).proof()  # a new term of the same owner: token 2
        opened = transition(2, first)
        with pytest.raises(InvalidArgument, match="a Commit requires leader_proof"):
            await rec_drain(auth, second, replace(drain(2, first), leader_proof=second))
        with pytest.raises(Fenced):
            await rec_drain(auth, first, drain(2, first))  # the opening term is gone
        abort = new_drain_decision(opened, second, ABORT)  # any canonical term may abort
        assert await rec_drain(auth, second, abort) == DecisionCreated(abort)
        commit = drain(3, second)  # the current term commits its own transition
        assert await rec_drain(auth, second, commit) == DecisionCreated(commit)

    asyncio.run(main())


@LOCAL
def test_la15_versions_strictly_increase(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        auth, proof = await leader(make_store())
        for version in (2, 5):  # gaps are allowed
            assert isinstance(await rec_drain(auth, proof, drain(version, proof)), DecisionCreated)
        for version in (3, 4):
            with pytest.raises(
                Refused, match=f"version {version} does not advance durable version 5"
            ):
                await rec_drain(auth, proof, drain(version, proof))
        assert await live_versions(auth) == [(2, 2), (3, 5)]
        with pytest.raises(InvalidArgument, match="must be nonzero"):
            await assignment_drain_decision(auth, 0)

    asyncio.run(main())
