"""The snapshot watcher's memory between ticks (RB §4.11 "Watcher state").

Nothing here is durable: a restarted watcher starts from these defaults and re-derives
everything from the store on its first tick (RB-12: doubt closes authority, it never opens it).
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.assignment.digest import AssignmentDrainId
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.lease.records import AssignmentDrainTransition

# (assignment version, fence digest) of the fence the watcher last activated.
FenceIdentity = tuple[int, bytes]


@dataclass(slots=True)
class WatcherState:
    # The registry version whose placement metrics were last published (0: none yet).
    metrics_version: int = 0
    # The draining version this process last acknowledged (or skipped as a target-only joiner).
    last_drained: int = 0
    # The exact committed snapshot at the local version, and a drain transition bound to it.
    durable_snapshot: AssignmentSnapshot | None = None
    durable_drain_transition: AssignmentDrainTransition | None = None
    # The transition this process prepared and acknowledged, until its terminal is resolved.
    active_local_drain: AssignmentDrainTransition | None = None
    # (drain round, authority revision) while a terminal's source resolution holds intake.
    terminal_resolution_hold: tuple[AssignmentDrainId, int] | None = None
    # The fence the watcher last activated, and the authority revision that activation returned.
    installed_fence: FenceIdentity | None = None
    installed_authority_revision: int = 0
    # The drain transition that activation installed with the fence. Our engine keeps its own
    # copy (the Rust checkpoint path reads the controller's slot), so a transition published
    # into the controller alone still needs an activation.
    installed_transition: AssignmentDrainTransition | None = None
    # `assignment_authority_dirty`: authority was closed or doubted since the last activation.
    dirty: bool = False

    def clear_caches(self) -> None:
        self.durable_snapshot = None
        self.durable_drain_transition = None

    def cache(
        self,
        snapshot: AssignmentSnapshot | None,
        transition: AssignmentDrainTransition | None = None,
    ) -> None:
        self.durable_snapshot = snapshot
        self.durable_drain_transition = transition

    def clear_active_drain(self) -> None:
        self.active_local_drain = None
        self.terminal_resolution_hold = None
