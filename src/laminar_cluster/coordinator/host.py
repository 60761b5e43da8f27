"""`CheckpointHost`: what a participant's engine gives the coordinator (and gets back).

The coordinator owns the protocol and every durable object; the host owns the data. On a
prepare for the fence it runs, the host stops consuming at one cut and returns, per owned
vnode, the state and source offsets at that cut, plus the sink output produced since its last
committed checkpoint. It resumes only when `resolve` tells it the outcome: Commit makes that
output durable history (the host forgets it), Abort keeps it pending for the next attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant


@dataclass(frozen=True, slots=True)
class VnodeCut:
    # None: the vnode's empty state, what `Processor.restore(vnode, None)` starts from; then no
    # offset may be above 0 and the participant writes no partial for it (DC-15).
    state: bytes | None
    offsets: Mapping[int, int]  # source partition -> next offset to read


@dataclass(frozen=True, slots=True)
class Cut:
    vnodes: Mapping[int, VnodeCut]  # exactly the vnodes the fence gives this process
    output: bytes  # sink records since the last committed checkpoint


class CheckpointHost(Protocol):
    def local_participant(self) -> FenceParticipant: ...

    def running_fence(self) -> CheckpointAssignmentFence | None:
        """The fence whose vnodes this process runs now (None: not running one)."""
        ...

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        """Stop consuming at one cut and capture it; raise a LaminarError to refuse (the attempt
        aborts; any other exception aborts it too, as a bug, logged and counted)."""
        ...

    async def resolve(
        self, attempt: CheckpointAttempt, committed: bool, *, deadline: float
    ) -> None:
        """The attempt's outcome is known: commit (forget the output) or abort (keep it), and
        resume consuming."""
        ...
