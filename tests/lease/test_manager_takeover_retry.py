"""A failed takeover is retried at the next renewal tick, never at once (lease/manager.py).

Found by the rebalance simulation (tests/sim, seed 7 before the fix): a follower observing a
silent leader reached the takeover instant while cut off from the store; every `try_takeover`
failed at once, and the manager retried immediately, forever, without time passing: a tight
loop against a failing store (in the simulation, a livelock).
"""

from __future__ import annotations

import itertools

from laminar_cluster.errors import StoreUnavailable
from tests.lease.manager_sim import SimClock
from tests.lease.manager_support import RENEW, TTL, FakeAuthority, fake_case, owner, running

FAILURES = 5


def test_failed_takeover_waits_for_the_next_tick() -> None:
    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        fake.install(owner(2))  # a rival that never renews
        fake.errors["try_takeover"] = [
            StoreUnavailable("injected: the store is unreachable") for _ in range(FAILURES)
        ]
        async with running(clock, fake) as run:
            await run.drive(TTL + (FAILURES + 2) * RENEW)
            attempts = [
                at
                for name, at in zip(fake.calls, fake.call_times, strict=True)
                if name == "try_takeover"
            ]
            assert len(attempts) == FAILURES + 1, fake.calls
            gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
            assert all(gap >= RENEW * 0.99 for gap in gaps), gaps
            lease = run.lease()
            assert lease is not None and lease.owner == owner(1)
            assert fake.lease == lease

    fake_case(body)


def test_first_takeover_is_exactly_at_the_instant() -> None:
    """The retry gate does not delay the first attempt (LA-7: a full ttl of observation)."""

    async def body(clock: SimClock, fake: FakeAuthority) -> None:
        fake.install(owner(2))
        async with running(clock, fake) as run:
            await run.drive(TTL + RENEW)
            attempts = [
                at
                for name, at in zip(fake.calls, fake.call_times, strict=True)
                if name == "try_takeover"
            ]
            begun = fake.call_times[fake.calls.index("begin_new_term")]
            assert attempts and attempts[0] - begun <= TTL + 1e-9, (begun, attempts)

    fake_case(body)
