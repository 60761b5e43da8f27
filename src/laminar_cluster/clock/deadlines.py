"""Running a block under a caller's absolute deadline; waiting for the first of two events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from laminar_cluster.clock.api import Clock
from laminar_cluster.errors import DeadlineExceeded


@asynccontextmanager
async def within_deadline(clock: Clock, deadline: float, what: str) -> AsyncIterator[None]:
    """Run the block until `deadline` (absolute `clock.monotonic()`); DeadlineExceeded after,
    and at once if it has already passed."""
    if clock.monotonic() >= deadline:
        raise DeadlineExceeded(f"{what}: deadline passed before the operation started")
    try:
        async with clock.timeout_at(deadline):
            yield
    except TimeoutError as error:
        raise DeadlineExceeded(f"{what}: deadline passed") from error


async def first_of(first: asyncio.Event, second: asyncio.Event) -> None:
    """Return once either event is set."""
    async with asyncio.TaskGroup() as group:
        waits = {group.create_task(first.wait()), group.create_task(second.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
