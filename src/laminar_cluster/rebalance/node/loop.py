"""The rebalance controller loop, on every node (spec_rebalance §4.2).

It wakes on a membership change (then waits for `rebalance_debounce` of quiet) or on the audit
tick (`watcher_poll`, first tick immediate, missed ticks skipped), and while this process is
leader runs `try_rebalance` until it succeeds, finds nothing to do, or leadership is lost;
failed attempts are retried every `retry_delay`. Shutdown wins every wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from laminar_cluster.errors import LaminarError
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.coordinated.stopped import run_stopped_recovery_round
from laminar_cluster.rebalance.interfaces import RebalanceError
from laminar_cluster.rebalance.rotation.planner import try_rebalance

logger: Final = logging.getLogger(__name__)

Attempt = Callable[[RebalanceContext, Sequence[int]], Awaitable[int | None]]


async def rebalance_attempt(ctx: RebalanceContext, live: Sequence[int]) -> int | None:
    """One leader attempt: first a coordinated-recovery round when this process is
    recovering (a missed ack quorum left a draining head, §1.3), then `try_rebalance`."""
    if ctx.controller.is_recovering():
        settled = await run_stopped_recovery_round(ctx)
        if settled is not None:
            return settled
    return await try_rebalance(ctx, live)


class RebalanceLoop:
    """One node's controller loop. `attempt` is `rebalance_attempt` (injectable for tests)."""

    def __init__(self, ctx: RebalanceContext, attempt: Attempt = rebalance_attempt) -> None:
        self.ctx = ctx
        self._attempt = attempt
        self.attempts = 0  # how many times `attempt` ran (for tests and metrics)
        self.last_error: str | None = None

    async def run(self, shutdown: asyncio.Event) -> None:
        ctx = self.ctx
        clock = ctx.clock
        watch = ctx.controller.members_watch()
        seen = watch.version()
        next_tick = clock.monotonic()  # the first audit tick fires immediately
        while not shutdown.is_set():
            now = clock.monotonic()
            if now >= next_tick:
                # Skip missed ticks: the next one is a whole period after now.
                next_tick = now + ctx.config.watcher_poll_s
                changed = False
            else:
                woke = await self._wait(shutdown, watch.changed(seen), next_tick)
                if woke is None:
                    continue  # the tick (or shutdown; the loop condition decides)
                seen, changed = woke, True
            if shutdown.is_set():
                return
            if changed:
                seen = await self._debounce(shutdown, seen)
                if shutdown.is_set():
                    return
            await self._attempt_until_settled(shutdown)

    async def _debounce(self, shutdown: asyncio.Event, seen: int) -> int:
        """Wait until `rebalance_debounce` passes with no further change (§4.2)."""
        ctx = self.ctx
        watch = ctx.controller.members_watch()
        while not shutdown.is_set():
            quiet_until = ctx.clock.monotonic() + ctx.config.rebalance_debounce_s
            woke = await self._wait(shutdown, watch.changed(seen), quiet_until)
            if woke is None:
                return seen
            seen = woke
        return seen

    async def _wait(
        self, shutdown: asyncio.Event, changed: Awaitable[int], until: float
    ) -> int | None:
        """The new watch version, or None at `until` or shutdown."""
        clock = self.ctx.clock
        closed = False
        result: int | None = None
        async with asyncio.TaskGroup() as group:
            change = group.create_task(_settled(changed))
            stop = group.create_task(shutdown.wait())
            try:
                async with clock.timeout_at(until):
                    await asyncio.wait({change, stop}, return_when=asyncio.FIRST_COMPLETED)
            except TimeoutError:
                pass
            finally:
                change.cancel()
                stop.cancel()
        if change.done() and not change.cancelled():
            outcome = change.result()
            if isinstance(outcome, RebalanceError):
                closed = True
            else:
                result = outcome
        if closed:
            logger.info("membership watch closed; rebalance loop exits")
            shutdown.set()
        return result

    async def _attempt_until_settled(self, shutdown: asyncio.Event) -> None:
        ctx = self.ctx
        while not shutdown.is_set():
            if not ctx.controller.is_leader():
                return
            live = ctx.controller.assignable_instances()
            self.attempts += 1
            try:
                settled = await self._attempt(ctx, live)
            except (LaminarError, ValueError) as error:
                self.last_error = str(error)
                logger.warning("rebalance attempt failed; retrying: %s", error)
                if await self._sleep(shutdown, ctx.config.retry_delay_s):
                    return
                continue
            self.last_error = None
            if settled is not None:
                logger.info("rotated to assignment %d", settled)
            return

    async def _sleep(self, shutdown: asyncio.Event, seconds: float) -> bool:
        """Sleep, or return True early on shutdown."""
        clock = self.ctx.clock
        try:
            async with clock.timeout_at(clock.monotonic() + seconds):
                await shutdown.wait()
        except TimeoutError:
            return False
        return True


async def _settled(changed: Awaitable[int]) -> int | RebalanceError:
    """The watch result, with a closed watch as a value (a TaskGroup must not fail)."""
    try:
        return await changed
    except RebalanceError as error:
        return error
