"""A node's lifecycle on its process lease: joining -> active, renewal, graceful leave
(ML §1.3, ML §2.2, ML §4.9.3; docs/protocols/membership.md).

`keep_renewed` renews every `interval_s` until the lease is released (state `left`) and raises
`ProcessFenced` when superseded or when the local deadline passes (ML-2, ML-5). `leave`
announces `draining`, waits until this node owns no vnodes, then writes `left` (ML-7).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, StoreUnavailable
from laminar_cluster.membership.process_lease import ProcessLeaseHolder
from laminar_cluster.membership.records import NodeState

DRAIN_POLL_S_DEFAULT: Final = 0.1


async def keep_renewed(holder: ProcessLeaseHolder, clock: Clock, *, interval_s: float) -> None:
    """Renew until released. A failed attempt is retried on the next tick while the lease is
    still valid locally; `renew` raises ProcessFenced once it is not (ML-5)."""
    if not 0 < interval_s * 1000 < holder.ttl_ms:
        raise InvalidArgument(f"renew interval {interval_s} s must be in (0, ttl)")
    # The loop lives as long as the process; each renewal is bounded by attempts and by the
    # lease's own validity, which ends it with ProcessFenced.
    while not holder.released:
        await clock.sleep(interval_s)
        if holder.released:
            return
        valid_until_s = holder.valid_until_s
        deadline = clock.monotonic() + interval_s if valid_until_s is None else valid_until_s
        try:
            await holder.renew(deadline=deadline)  # ProcessFenced past the local deadline
        except (StoreUnavailable, DeadlineExceeded):
            continue
        except InvalidArgument:
            if holder.released:
                return  # `leave` wrote left while this renewal waited for the lock
            raise


async def activate(holder: ProcessLeaseHolder, *, deadline: float) -> None:
    """joining -> active (only active nodes are assignable, ML §1.3), once this node's id is
    in the roster (ML-14: discovery finds a join without listing). Safe to repeat: the roster
    join reads first, the renewal reads back."""
    await holder.join_roster(deadline=deadline)
    await holder.renew(deadline=deadline, state=NodeState.ACTIVE)


async def wait_until_drained(
    owns_vnodes: Callable[[], Awaitable[bool]],
    *,
    clock: Clock,
    deadline: float,
    poll_s: float = DRAIN_POLL_S_DEFAULT,
) -> None:
    """Return once `owns_vnodes()` is false; DeadlineExceeded at `deadline`."""
    if poll_s <= 0:
        raise InvalidArgument(f"drain poll interval {poll_s} s must be positive")
    polls_max = max(1, math.ceil(max(0.0, deadline - clock.monotonic()) / poll_s) + 1)
    for _ in range(polls_max):
        if not await owns_vnodes():
            return
        remaining_s = deadline - clock.monotonic()
        if remaining_s <= 0:
            break
        await clock.sleep(min(poll_s, remaining_s))
    raise DeadlineExceeded(f"node still owns vnodes after {polls_max} drain polls")


async def leave(
    holder: ProcessLeaseHolder,
    owns_vnodes: Callable[[], Awaitable[bool]],
    *,
    clock: Clock,
    deadline: float,
    poll_s: float = DRAIN_POLL_S_DEFAULT,
    on_state: Callable[[NodeState], None] | None = None,
) -> None:
    """ML-7: draining, then no vnodes owned, then left; the lease is released after `left`.
    `on_state` hears each state once it is durable."""
    await holder.renew(deadline=deadline, state=NodeState.DRAINING)
    if on_state is not None:
        on_state(NodeState.DRAINING)
    await wait_until_drained(owns_vnodes, clock=clock, deadline=deadline, poll_s=poll_s)
    await holder.renew(deadline=deadline, state=NodeState.LEFT)
    if on_state is not None:
        on_state(NodeState.LEFT)
