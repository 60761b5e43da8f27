"""LeaseDeadline (LA §4.9.2), LeaderCandidacy and its watch (LA §3.10), the manager's config and
construction (LA §4.9.1), and the loop's rules of LA §4.9.3 and LA §6 beyond LA-T91 to LA-T98:
takeover after a full observation, error handling, tick skipping and the attempt-start anchor
(LA-8)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import Any

import pytest

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.errors import Fenced, InvalidArgument, StoreUnavailable
from laminar_cluster.lease.candidacy import CandidacyWatch, LeaderCandidacy
from laminar_cluster.lease.deadline import LeaseDeadline, LeaseWatch
from laminar_cluster.lease.manager import LeaderLeaseManager, LeaseManagerConfig
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from tests.lease.manager_sim import SimClock, drive
from tests.lease.manager_support import (
    CONFIG,
    RENEW,
    TICK,
    TTL,
    FakeAuthority,
    fake_case,
    owner,
    running,
)

RIVAL = owner(2)


def sim(main: Coroutine[Any, Any, None]) -> None:
    asyncio.run(main)


# LeaseDeadline


def test_deadline_live_strictly_before_its_instant_and_never_resurrected() -> None:
    async def main() -> None:
        clock = SimClock()
        deadline = LeaseDeadline(clock)
        assert not deadline.is_live() and not deadline.terminal
        deadline.extend_until(clock.monotonic() + 1)
        await drive(clock, 1 - TICK)
        assert deadline.is_live()
        await drive(clock, TICK)
        assert not deadline.is_live() and not deadline.terminal
        deadline.extend(60)  # a lapsed grant may have been taken over: terminalise
        assert deadline.terminal and not deadline.is_live() and deadline.valid_until is None

    sim(main())


def test_deadline_withdraw_is_renewable_and_fence_is_terminal() -> None:
    async def main() -> None:
        clock = SimClock()
        deadline = LeaseDeadline.live_for(clock, 5)
        deadline.withdraw()
        assert not deadline.is_live() and not deadline.terminal
        deadline.extend(5)
        assert deadline.is_live()
        deadline.fence()
        deadline.extend(5)
        deadline.withdraw()
        assert deadline.terminal and not deadline.is_live()
        assert LeaseDeadline.fenced(clock).terminal
        before_origin = LeaseDeadline(clock)
        before_origin.extend_until(clock.monotonic() - 1)
        assert before_origin.terminal
        nan = LeaseDeadline(clock)
        nan.extend_until(math.nan)
        assert nan.terminal

    sim(main())


def test_deadline_waiters_follow_renewals_and_wake_on_fence_or_expiry() -> None:
    async def main() -> None:
        clock = SimClock()
        deadline = LeaseDeadline.live_for(clock, 1)
        async with asyncio.TaskGroup() as group:
            waiter = group.create_task(deadline.wait_until_expired())
            await drive(clock, 0.5)
            deadline.extend(1)  # valid until start + 1.5 now
            await drive(clock, 1 - TICK)
            assert not waiter.done()
            await drive(clock, TICK)
            assert waiter.done() and deadline.terminal  # natural expiry terminalises
            fenced = LeaseDeadline.live_for(clock, 60)
            waiter = group.create_task(fenced.wait_until_expired())
            changed = group.create_task(fenced.wait_changed())
            await drive(clock, 0)
            fenced.fence()
            await drive(clock, 0)
            assert waiter.done() and changed.done()
        await LeaseDeadline(clock).wait_until_expired()  # not holding: returns at once

    sim(main())


# LeaderCandidacy and its watch


def test_candidacy_generation_counts_lost_grants() -> None:
    initial = LeaderCandidacy.initial(True)
    assert initial == LeaderCandidacy(eligible=True, generation=1)
    lost = initial.transition(False)
    assert lost == LeaderCandidacy(eligible=False, generation=2)
    assert lost.transition(True) == LeaderCandidacy(eligible=True, generation=2)
    assert initial.transition(True) == initial
    assert LeaderCandidacy(eligible=True, generation=U64_MAX).transition(False) is None
    assert LeaderCandidacy.terminal() == LeaderCandidacy(eligible=False, generation=U64_MAX)


def test_candidacy_watch_shows_coalesced_flaps_and_closes() -> None:
    async def main() -> None:
        watch = CandidacyWatch()
        seen = watch.current()
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(watch.wait_changed(seen))
            watch.set(False)
            watch.set(True)  # coalesced: eligible again, but the generation moved
            assert await waiting == LeaderCandidacy(eligible=True, generation=2)
        assert await watch.wait_changed(seen) == watch.current()
        watch.close()
        assert await watch.wait_changed(watch.current()) is None
        assert watch.set(False) == LeaderCandidacy(eligible=True, generation=2)
        overflowing = CandidacyWatch()
        overflowing._value = LeaderCandidacy(eligible=True, generation=U64_MAX)
        assert overflowing.set(False) == LeaderCandidacy.terminal() and overflowing.closed

    sim(main())


def test_lease_watch_counts_changes() -> None:
    async def main() -> None:
        watch = LeaseWatch()
        lease = FakeAuthority(SimClock(), TTL).install(owner(1))
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(watch.wait_changed())
            await asyncio.sleep(0)
            watch.publish(lease)
            assert await waiting == lease
        watch.publish(lease)
        assert watch.version == 1 and await watch.wait_changed(0) == lease

    sim(main())


# configuration and construction (LA §4.9.1)


@pytest.mark.parametrize(
    ("ttl_s", "renew_s"),
    [(0.0, 0.1), (-1.0, 0.1), (math.inf, 1.0), (math.nan, 1.0), (1.0005, 0.5), (1.0, 0.0),
     (1.0, 1.0), (1.0, 2.0), (1.0, -0.5)],
)  # fmt: skip
def test_config_rejects_bad_timings(ttl_s: float, renew_s: float) -> None:
    with pytest.raises(InvalidArgument):
        LeaseManagerConfig(ttl_s=ttl_s, renew_interval_s=renew_s)


def test_config_defaults_and_construction_checks() -> None:
    assert (LeaseManagerConfig().ttl_ms, LeaseManagerConfig().renew_interval_s) == (5000, 2.0)
    clock = SimClock()
    with pytest.raises(InvalidArgument, match="ttl 1000 ms must equal the store's ttl 2000 ms"):
        LeaderLeaseManager(FakeAuthority(clock, 2.0), owner(1), CONFIG, clock)
    nil_boot = LeaderLeaseOwner(node=1, boot=UUID_NIL, process_term=1)
    for bad in (owner(0), owner(1, term=0), nil_boot):
        with pytest.raises(InvalidArgument, match="must be nonzero"):
            LeaderLeaseManager(FakeAuthority(clock, TTL), bad, CONFIG, clock)


UUID_NIL = "00000000-0000-0000-0000-000000000000"


def test_run_twice_is_refused() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        async with running(clock, fake) as run:
            await run.drive(0)
        with pytest.raises(InvalidArgument, match="already called"):
            await run.manager.run(CandidacyWatch(), asyncio.Event())

    fake_case(body)


# the loop (LA §4.9.3, LA §6)


def test_takeover_after_a_full_observation_of_an_unchanged_rival() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        fake.install(RIVAL)
        start = clock.monotonic()
        async with running(clock, fake) as run:
            await run.drive(TTL - TICK)
            assert run.lease() is None and not run.manager.deadline.is_live()
            # While observing, the rival's liveness is re-read (no takeover attempt yet).
            assert fake.calls[0] == "begin_new_term" and "try_takeover" not in fake.calls
            assert set(fake.calls[1:]) == {"load"}
            await run.drive(TICK)
            lease = run.lease()
            assert lease is not None and lease.token == 2 and lease.owner == owner(1)
            # LA-7: the takeover runs exactly a full ttl after the observation started.
            assert fake.calls[-1] == "try_takeover"
            assert fake.call_times[-1] == start + TTL

    fake_case(body)


def test_a_renewing_rival_restarts_the_observation() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        fake.install(RIVAL)
        async with running(clock, fake) as run:
            for _ in range(8):
                await run.drive(0.5)
                fake.install(RIVAL)  # the rival renews: a new liveness identity
            assert run.lease() is None and fake.lease is not None
            # Every renewal seen by a poll restarts the observation: no takeover is attempted.
            assert fake.lease.owner == RIVAL and "try_takeover" not in fake.calls
            assert fake.calls.count("load") >= 8

    fake_case(body)


def test_store_errors_keep_the_token_until_the_deadline() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        start = clock.monotonic()
        fake.errors["renew_exact"] = [StoreUnavailable("store down")] * 2
        async with running(clock, fake) as run:
            await run.drive(3 * RENEW)  # two failed renewals, then one that lands
            lease = run.lease()
            assert lease is not None and lease.token == 1 and lease.seq == 2
            assert run.manager.deadline.valid_until == start + 3 * RENEW + TTL
            fake.errors["renew_exact"] = [StoreUnavailable("store down")] * 100
            await run.drive(TTL - TICK)
            assert run.manager.deadline.is_live() and not run.task.done()
            await run.drive(TICK)  # LA-8: no renewal landed in time: fence at valid_until
            assert run.task.done() and run.manager.deadline.terminal
            assert clock.monotonic() == start + 3 * RENEW + TTL

    fake_case(body)


def test_fenced_renewal_and_foreign_acquisition_fence_the_manager() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        async with running(clock, fake) as run:
            await run.drive(0)
            fake.install(RIVAL, token=2)  # a takeover happened behind our back
            await run.drive(RENEW)
            assert run.task.done() and run.manager.deadline.terminal and run.lease() is None
        foreign = FakeAuthority(clock, TTL)

        async def acquired_for_rival(owner_: object, *, deadline: float) -> Acquired:
            return Acquired(lease=foreign.install(RIVAL))

        foreign.begin_new_term = acquired_for_rival  # type: ignore[method-assign,assignment]
        async with running(clock, foreign) as run:
            await run.drive(0)
            assert run.task.done() and run.manager.deadline.terminal

    fake_case(body)


def test_validity_is_anchored_at_the_attempt_start_and_missed_ticks_are_skipped() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        start = clock.monotonic()
        async with running(clock, fake) as run:
            await run.drive(0)
            fake.respond_after_s["renew_exact"] = 12 / 64  # the renewal at +0.25 answers later
            await run.drive(RENEW + 13 / 64)
            assert run.manager.deadline.valid_until == start + RENEW + TTL  # LA-8: the start
            fake.respond_after_s["renew_exact"] = 0.625  # the renewal at +0.5 answers at +1.125
            await run.drive(1.5 - RENEW - 13 / 64)
            offsets = [t - start for t in fake.call_times]
            assert offsets == [0.0, 0.25, 0.5, 1.125, 1.25, 1.5]  # no burst of missed ticks

    fake_case(body)


def test_closed_candidacy_fences() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        async with running(clock, fake) as run:
            await run.drive(0)
            run.candidacy.close()
            await run.drive(0)
            assert run.task.done() and run.manager.deadline.terminal

    fake_case(body)


def test_fenced_error_value_is_terminal() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        fake.errors["begin_new_term"] = [Fenced("lost the durable authority head")]
        async with running(clock, fake) as run:
            await run.drive(0)
            assert run.task.done() and run.manager.deadline.terminal
            assert fake.calls == ["begin_new_term"]

    fake_case(body)
