"""Change detection without listing (DC-18): participants read `checkpoints/pointer.json` with a
conditional GET on a schedule tied to the checkpoint interval (every wait at most `quiet_s`: the
bound on noticing a prepare); the pointer is a hint, so a lost or stale pointer costs at most one
aborted attempt, a lost verdict only a later (backing-off) authority read, and a corrupt pointer
is reported and skipped.
"""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.coordinator import leader as leader_module
from laminar_cluster.coordinator.participant import CheckpointParticipant, InDoubt, Resolved
from laminar_cluster.coordinator.paths import POINTER_PATH
from laminar_cluster.coordinator.pointer import (
    HURRY_FAST_POLLS,
    HURRY_INTERVALS,
    QUIET_MAX_S,
    WINDOW_FAST_POLLS_MAX,
    PointerReader,
    PollSchedule,
)
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.store import OVERWRITE, open_store
from laminar_cluster.store.counting import CountingStore
from tests.coordinator.support import make_cluster, point_at_verdict, write_prepare
from tests.coordinator.test_participant import abort


def test_dc18_every_wait_is_at_most_quiet_and_fast_around_the_expected_prepare() -> None:
    schedule = PollSchedule.for_interval(0.05, 5.0)
    assert schedule.quiet_s == QUIET_MAX_S == 1.0  # interval / 4, at most 1 s
    assert PollSchedule.for_interval(0.05, 0.4).quiet_s == 0.1
    assert PollSchedule.for_interval(0.05, None).quiet_s == 0.05  # unknown: every poll_s
    # Nothing seen yet: back off from fast to quiet.
    assert [schedule.next_delay(0.0) for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    schedule.prepare_seen(10.0)  # busy: fast again, backing off
    assert [schedule.next_delay(10.0) for _ in range(3)] == [0.05, 0.1, 0.2]
    schedule.settled()  # decided: quiet until the window before 10 + 5 (at most quiet apart)
    assert schedule.next_delay(10.4) == 1.0
    assert schedule.next_delay(14.0) == pytest.approx(0.8)  # lands at the window's start
    assert schedule.next_delay(14.85) == 0.05  # the window: due -+ 0.2 s
    assert schedule.next_delay(15.15) == 0.05
    # Late: a leader puts off a periodic checkpoint it cannot start by one interval, so it is
    # expected once more, one period later (quiet until that window), and only then given up.
    assert schedule.next_delay(15.3) == 1.0
    assert schedule.next_delay(19.5) == pytest.approx(0.3)
    assert schedule.next_delay(19.85) == 0.05  # the second window: 20 -+ 0.2 s
    assert schedule.next_delay(20.15) == 0.05
    late = [schedule.next_delay(20.3) for _ in range(7)]  # late again: back off, to quiet
    assert late == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    schedule.prepare_seen(16.0)  # the period learnt: 6 s (never below the interval)
    schedule.settled()
    assert schedule.period_s == 6.0 and schedule.next_delay(21.85) == 0.05
    schedule.prepare_seen(17.0, periodic=False)  # a pre-rotation prepare: nothing learnt
    assert schedule.period_s == 6.0
    schedule.settled()
    assert schedule.next_delay(21.85) == 0.05  # still expected at 16 + 6
    schedule.prepare_seen(19.0)  # a periodic one sooner than the interval: 5 s again
    assert schedule.period_s == 5.0
    for now_s in (0.0, 3.3, 16.9, 21.0, 99.0):
        assert all(0 < schedule.next_delay(now_s) <= schedule.quiet_s for _ in range(10))
    with pytest.raises(InvalidArgument):
        PollSchedule(0.5, 0.1)


def test_dc18_the_leaders_hint_sets_the_window_without_a_learnt_period() -> None:
    """A participant that never saw a periodic prepare (a new node, a new leader) polls fast
    around the time the verdict pointer's `next_in_ms` names, and quietly before it."""
    schedule = PollSchedule.for_interval(0.05, 5.0)
    schedule.prepare_seen(10.0, periodic=False)  # only a pre-rotation prepare seen
    schedule.settled()
    schedule.expect(12.0)  # the verdict pointer: the next periodic prepare in 2 s
    assert schedule.next_delay(10.5) == pytest.approx(1.0)  # quiet until the window
    assert schedule.next_delay(11.5) == pytest.approx(0.3)  # lands at the window's start
    assert schedule.next_delay(11.85) == 0.05  # the window: 12 -+ 0.2 s
    assert schedule.next_delay(12.15) == 0.05
    schedule.prepare_seen(12.05)  # the prepare came: the hint is spent
    schedule.settled()
    assert schedule.next_delay(12.5) == 1.0  # learnt anchor: 12.05 + 5


def test_dc18_after_a_cluster_change_every_wait_is_short_for_two_intervals() -> None:
    """A pre-rotation prepare or a new leader's first is announced by no pointer; it follows a
    membership change or a new fence, which every node sees: for two intervals after `hurry`
    each wait is at most `HURRY_FAST_POLLS` fast polls, then the schedule is quiet again."""
    schedule = PollSchedule.for_interval(0.05, 4.0)
    schedule.prepare_seen(0.0)
    schedule.settled()
    assert _polls(schedule, 0.5, 3.0)[0] == pytest.approx(1.0)  # quiet, before the window
    schedule.hurry(10.0)
    hurried = _polls(schedule, 10.0, 10.0 + HURRY_INTERVALS * 4.0)
    assert max(hurried) <= HURRY_FAST_POLLS * 0.05
    assert _polls(schedule, 18.1, 30.0)[-5:] == [1.0] * 5  # two intervals later: quiet again
    unknown = PollSchedule.for_interval(0.05, None)  # no interval: every poll fast anyway
    unknown.hurry(0.0)
    assert set(_polls(unknown, 0.0, 5.0)) == {0.05}


def test_dc18_the_verdict_pointer_carries_the_next_periodic_prepare(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url, owners=(1, 1, 1, 1))
        participant = cluster.participant(cluster.host(1))
        due = cluster.clock.monotonic() + 30.0
        cluster.leader._next_prepare = lambda: due  # what runtime.node wires (duties' next)
        async with cluster.running([participant]):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline(10.0))
        assert result.success, result.error
        reader = PointerReader(cluster.store)
        assert await reader.poll() and reader.last is not None
        assert reader.last.verdict is CheckpointVerdict.COMMIT
        assert reader.last.next_in_ms is not None
        assert 20_000 < reader.last.next_in_ms <= 30_000
        assert participant.schedule._expected_s is not None  # the participant took the hint

    asyncio.run(main())


def _polls(schedule: PollSchedule, start_s: float, end_s: float) -> list[float]:
    """The waits a participant makes from `start_s` to `end_s` with nothing new."""
    waits, now_s = [], start_s
    while now_s < end_s:
        wait_s = schedule.next_delay(now_s)
        waits.append(wait_s)
        now_s += wait_s
    return waits


def test_dc21_skipped_checkpoints_never_make_the_pointer_poll_faster() -> None:
    """DC-21 with DC-18: while the leader skips its checkpoints no prepare comes; after the
    fast window around the expected prepare, and one more a period later (where a put-off
    periodic prepare would come), the schedule backs off to `quiet_s` and stays
    there for the whole quiet stretch, and the long period it then learns from the next prepare
    only ever spaces the polls out (each wait is still at most `quiet_s`)."""
    for hinted in (False, True):
        _quiet_stretch(hinted)


def _quiet_stretch(hinted: bool) -> None:
    schedule = PollSchedule.for_interval(0.05, 10.0)
    schedule.prepare_seen(0.0)
    schedule.settled()
    if hinted:  # the verdict pointer named the next periodic prepare, which is then skipped
        schedule.expect(10.0)
    waits = _polls(schedule, 0.0, 600.0)
    fast = [w for w in waits if w < schedule.quiet_s]
    assert len(fast) <= 2 * (2 * WINDOW_FAST_POLLS_MAX + 1) + 8  # two windows, one back-off
    assert len(waits) <= 600.0 / schedule.quiet_s + len(fast) + 1
    assert waits[-50:] == [schedule.quiet_s] * 50  # a long quiet stretch polls at quiet_s
    schedule.prepare_seen(600.0)  # a busy participant: the leader checkpoints again
    assert schedule.period_s == 600.0
    schedule.settled()
    later = _polls(schedule, 600.5, 900.0)
    assert all(w == schedule.quiet_s for w in later[:-1]), later[:20]


def test_dc18_a_corrupt_pointer_is_skipped_once_and_an_unchanged_one_costs_no_body() -> None:
    async def main() -> None:
        store = CountingStore(open_store("memory://"))
        reader = PointerReader(store)
        assert not await reader.poll()  # no pointer yet
        await store.put(POINTER_PATH, b'{"version":1}', OVERWRITE)
        assert not await reader.poll() and reader.corrupt == 1 and reader.last is None
        assert not await reader.poll() and reader.corrupt == 1  # the same version: not re-read
        cluster = await make_cluster("memory://")
        cluster.store = store.inner
        reader = PointerReader(cluster.store)
        attempt = await write_prepare(cluster)
        assert await reader.poll() and reader.last is not None
        assert reader.last.prepare.attempt == attempt and reader.last.verdict is None
        assert not await reader.poll()  # unchanged
        await point_at_verdict(cluster, attempt, CheckpointVerdict.COMMIT)
        assert await reader.poll() and reader.last.verdict is CheckpointVerdict.COMMIT
        assert reader.changes == 2

    asyncio.run(main())


def test_dc18_a_lost_verdict_is_found_by_the_backing_off_authority_read(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        attempt = await write_prepare(cluster)
        assert await p.step() == InDoubt(attempt)
        await abort(cluster, attempt, cluster.proof, point=False)  # the pointer write is lost
        started = cluster.clock.monotonic()
        outcome = await p.step()
        for _ in range(50):
            if outcome != InDoubt(attempt):
                break
            outcome = await p.step()
        assert outcome == Resolved(attempt, False)
        assert cluster.clock.monotonic() - started < 3.0  # the first read is due after 1 s

    asyncio.run(main())


def test_dc18_a_lost_prepare_pointer_costs_one_aborted_attempt(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        written = leader_module.write_pointer
        lost: list[int] = []

        async def lose_the_first(
            store: object, prepare: CheckpointPrepare, verdict: object, next_in_ms: object = None
        ) -> None:
            if not lost:
                lost.append(prepare.attempt.checkpoint_id)
                return  # the first write never lands
            await written(store, prepare, verdict, next_in_ms)  # type: ignore[arg-type]

        leader_module.write_pointer = lose_the_first  # type: ignore[assignment]
        try:
            async with cluster.running(participants):
                missed = await cluster.leader(cluster.fence, None, deadline=cluster.deadline(1.5))
                after = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
        finally:
            leader_module.write_pointer = written
        assert not missed.success and "no valid manifest by the deadline" in str(missed.error)
        assert after.success, after.error
        assert [h.cuts[0].checkpoint_id for h in cluster.hosts.values()] == [
            after.checkpoint_id
        ] * 3

    asyncio.run(main())


def test_dc18_a_stale_pointer_is_ignored(url: str) -> None:
    """A deposed leader's late overwrite shows an older prepare: nothing newer is cut for it."""

    async def main() -> None:
        cluster = await make_cluster(url)
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        old = await write_prepare(cluster)
        new = await write_prepare(cluster)
        assert await p.step() == InDoubt(new)  # the newest: `old` was never shown
        await abort(cluster, new, cluster.proof)
        assert await p.step() == Resolved(new, False)
        await point_at_verdict(cluster, old, CheckpointVerdict.ABORT)  # the stale overwrite
        assert host.cuts == [new]
        await p.step()
        assert host.cuts == [new] and p.pending is None

    asyncio.run(main())


def test_dc18_the_leaders_own_participant_is_woken_by_its_pointer_writes(url: str) -> None:
    """The node wires the leader's `pointed` to its own participant's `wake`: a participant in
    a long back-off reads the prepare at once, not at its next scheduled poll."""

    async def main() -> None:
        cluster = await make_cluster(url, owners=(1, 1, 1, 1))  # node 1 is the only participant
        participant = cluster.participant(cluster.host(1))
        participant.schedule = PollSchedule(60.0, 60.0)  # a poll a minute
        cluster.leader._pointed = participant.wake  # what runtime.node wires
        async with cluster.running([participant]):
            await asyncio.sleep(0.5)  # its first poll is behind it: the next is a minute away
            started = cluster.clock.monotonic()
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline(10.0))
            took_s = cluster.clock.monotonic() - started
        assert result.success, result.error
        assert took_s < 5.0, took_s

    asyncio.run(main())


def test_dc18_a_participant_hurries_when_its_fence_or_the_membership_changes(url: str) -> None:
    """The participant notes the running fence and the membership view's version at every poll:
    its start and each change of either hurry the schedule (DC-18); nothing else does."""

    async def main() -> None:
        cluster = await make_cluster(url, owners=(1, 1, 1, 1))
        host = cluster.host(1)
        store, _, authority = cluster.client()
        version = [1]
        participant = CheckpointParticipant(
            store,
            cluster.clock,
            authority,
            host,
            0.05,
            interval_s=4.0,
            members_version=lambda: version[0],
        )
        hurries: list[float] = []
        participant.schedule.hurry = hurries.append  # type: ignore[method-assign]
        await participant.step()  # the start: nothing seen before
        await participant.step()
        assert len(hurries) == 1
        version[0] = 2  # a membership change
        await participant.step()
        await participant.step()
        assert len(hurries) == 2
        host.fence = None  # a new fence (here: none running)
        await participant.step()
        assert len(hurries) == 3

    asyncio.run(main())


def test_dc18_only_a_periodic_prepare_on_the_announced_time_teaches_the_first_wait(
    url: str,
) -> None:
    """The leader tells its collector to learn only from a prepare participants expected: a
    periodic one within a few polls of the time its last verdict pointer named. The hint is
    spent by the next prepare; a pre-rotation one, a late one or one without a hint (a new
    leader's first) is not expected; a leader without hints learns from every prepare."""

    async def main() -> None:
        cluster = await make_cluster(url, owners=(1, 1, 1, 1))
        participant = cluster.participant(cluster.host(1))
        leader = cluster.leader
        clock = cluster.clock
        assert leader._announced(None)  # no `next_prepare`: every prepare counts
        leader._next_prepare = lambda: clock.monotonic() + 30.0
        assert not leader._announced(None)  # no verdict pointer written yet
        async with cluster.running([participant]):
            result = await leader(cluster.fence, None, deadline=cluster.deadline(10.0))
        assert result.success, result.error
        assert leader._hinted_s is not None  # the verdict pointer named the next prepare
        assert leader._hinted_s - clock.monotonic() == pytest.approx(30.0, abs=1.0)
        transition = AssignmentDrainTransition(
            predecessor=cluster.fence, target=cluster.fence, leader=cluster.proof
        )
        for hinted_s, drain, expected in [
            (clock.monotonic(), None, True),
            (clock.monotonic(), transition, False),  # pre-rotation
            (clock.monotonic() - 1.0, None, False),  # late
            (clock.monotonic() + 1.0, None, False),  # early
        ]:
            leader._hinted_s = hinted_s
            assert leader._announced(drain) is expected
            assert not leader._announced(None)  # spent

    asyncio.run(main())
