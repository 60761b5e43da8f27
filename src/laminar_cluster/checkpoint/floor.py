"""Reading the outcome GC floor (spec §3.7). STUB: being written."""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.reader import Loaded
from laminar_cluster.checkpoint.records import OutcomeGcFloor


async def read_floor(ctx: DecisionContext) -> Loaded[OutcomeGcFloor] | None:
    raise NotImplementedError
