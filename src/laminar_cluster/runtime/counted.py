"""The checkpoint pieces a `StreamNode` (node.py) wraps: a `ClusterCheckpointer` whose every call
is reported to the node's metrics, and a `Restorer` whose store requests count as `restore`."""

from __future__ import annotations

from collections.abc import Callable

from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.clock import Clock
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.restores import RestoredCuts, Restorer, RestoreSource
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.rebalance.node.stats import counted_as


class CountedCheckpointer:
    """A `ClusterCheckpointer` whose every call is reported: `finished(duration_s, verdict)`,
    with the verdict this call recorded (None: none, e.g. refused before a prepare)."""

    def __init__(
        self,
        inner: ClusterCheckpointer,
        clock: Clock,
        finished: Callable[[float, CheckpointVerdict | None], None],
    ) -> None:
        self.inner, self.clock, self.finished = inner, clock, finished

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        before = self.inner.last
        started_s = self.clock.monotonic()
        result = await self.inner(fence, transition, deadline=deadline)
        last = self.inner.last
        if last is not None and last is not before:
            self.finished(last.duration_s, last.verdict)
        else:
            self.finished(max(0.0, self.clock.monotonic() - started_s), None)
        return result


class CountedRestorer:
    """A `Restorer` whose store requests count as `restore` (checkpoint reads), apart from
    the source reads of the engine task that calls it."""

    def __init__(self, inner: Restorer) -> None:
        self.inner = inner

    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        with counted_as("restore"):
            return await self.inner(source, vnodes, deadline=deadline)
