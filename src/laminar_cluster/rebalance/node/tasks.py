"""Small long-running tasks of a `RebalanceNode` incarnation, and the wrapper that names each
task's purpose for the request counters (`rebalance.node.stats`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.node.leadership import ManagedLeadership, leader_eligible
from laminar_cluster.rebalance.node.stats import counting_as

# How long tasks get to finish by themselves after shutdown before they are cancelled.
SHUTDOWN_GRACE_S: Final = 2.0


async def counted_task(purpose: str, work: Awaitable[None]) -> None:
    """Run `work` with its store requests counted under `purpose`."""
    counting_as(purpose)
    await work


async def follow_candidacy(
    controller: StoreClusterController,
    engine: BaseEngine,
    leadership: ManagedLeadership,
    *,
    poll_s: float,
    shutdown: asyncio.Event,
) -> None:
    """Keep the leader candidacy equal to `leader_eligible` (node_leadership), checked
    every quarter poll from local state only (the registry and the latest view)."""
    clock = controller.clock
    while not shutdown.is_set():
        view = controller.membership_view()
        live = () if view is None else view.live_nodes()
        leadership.set_eligible(leader_eligible(controller.node_id, engine.registry().owners, live))
        try:
            async with clock.timeout_at(clock.monotonic() + poll_s / 4):
                await shutdown.wait()
        except TimeoutError:
            pass


async def cancel_after_shutdown(
    tasks: Sequence[asyncio.Task[None]], clock: Clock, shutdown: asyncio.Event
) -> None:
    """After shutdown, give the tasks `SHUTDOWN_GRACE_S` to return, then cancel the rest."""
    await shutdown.wait()
    try:
        async with clock.timeout_at(clock.monotonic() + SHUTDOWN_GRACE_S):
            await asyncio.wait(tasks)
    except TimeoutError:
        pass
    for task in tasks:
        task.cancel()
