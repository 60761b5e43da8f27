"""A node process's graceful leave (RB §4.17), once `request_leave()` was called.

Announce `draining` in the process lease, `wait_until_drained` (no vnodes of this node in an
authority-audited committed head), wait until the local engine runs an assignment without this
node, then write `left`: exit 0. If `leave_timeout_s` passes first the node stops without
writing `left` (exit 4), and its vnodes move through the recovery path.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, first_of
from laminar_cluster.errors import DeadlineExceeded, LaminarError, StoreUnavailable
from laminar_cluster.membership.process_lease import ProcessLeaseHolder
from laminar_cluster.membership.records import NodeState
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.node.config import NodeConfig
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.selection import wait_until_drained

EXIT_LEFT: Final = 0
EXIT_LEAVE_TIMEOUT: Final = 4


@dataclass(frozen=True, slots=True)
class GracefulLeave:
    holder: ProcessLeaseHolder
    clock: Clock
    config: NodeConfig
    log: NodeLog
    ctx: RebalanceContext
    engine: BaseEngine

    async def when_asked(self, requested: asyncio.Event, shutdown: asyncio.Event) -> int | None:
        """Wait for `requested`, then leave: the exit code (left or out of leave time); None
        when `shutdown` came first (a stop without leaving)."""
        await first_of(requested, shutdown)
        if shutdown.is_set():
            return None
        holder = self.holder
        self.log.write("leaving")
        deadline = self.clock.monotonic() + self.config.leave_timeout_s
        try:
            await self._announce(NodeState.DRAINING, deadline)
            self.log.write("draining", term=holder.record.lease.term)
            if not await self._drained(deadline):
                self.log.write("leave_timeout", after_s=self.config.leave_timeout_s)
                return EXIT_LEAVE_TIMEOUT
            await self._announce(NodeState.LEFT, deadline)
            self.log.write("left", term=holder.record.lease.term)
            return EXIT_LEFT
        except DeadlineExceeded as error:
            self.log.write("leave_timeout", error=str(error))
            return EXIT_LEAVE_TIMEOUT

    async def _announce(self, state: NodeState, deadline: float) -> None:
        """Write `state` into the process lease, retrying store failures until `deadline`
        (ProcessFenced, terminal, propagates)."""
        pause_s = self.config.renew_interval_s / 4
        attempts_max = math.ceil(max(0.0, deadline - self.clock.monotonic()) / pause_s) + 1
        last: LaminarError | None = None
        for _ in range(attempts_max):  # the deadline ends it first
            try:
                await self.holder.renew(deadline=deadline, state=state)
                return
            except (StoreUnavailable, DeadlineExceeded) as error:
                last = error
            if deadline - self.clock.monotonic() <= pause_s:
                break
            await self.clock.sleep(pause_s)
        raise DeadlineExceeded(f"announcing {state.value} did not finish in time: {last}")

    async def _drained(self, deadline: float) -> bool:
        """No vnodes in an authority-audited committed head, and the local engine runs one."""
        ctx, config, engine = self.ctx, self.config, self.engine
        drained = await wait_until_drained(
            ctx.snapshots,
            ctx.authority,
            config.node_id,
            config.vnode_count,
            config.poll_s,
            deadline,
            self.clock,
        )
        while drained and config.node_id in engine.registry().owners:
            remaining_s = deadline - self.clock.monotonic()
            if remaining_s <= 0:
                return False
            await self.clock.sleep(min(config.poll_s / 4, remaining_s))
        return drained
