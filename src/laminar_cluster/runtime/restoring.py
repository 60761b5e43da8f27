"""Where newly owned vnodes restore from (DC §3.4, DC §1.10).

A vnode is restored from the partials of one committed attempt: its state and the next offset
of each of its partitions. A handoff (a plain adoption acquiring vnodes) restores from the
latest committed cluster checkpoint, read when the restore runs: it is the pre-rotation
checkpoint or a later one, and none can commit under a fence that gives us the vnode while we
still restore it (our cut would be missing). A recovery generation restores from the recovery
checkpoint it names, or starts empty when the generation restores the initial state. With no
committed checkpoint at all a vnode starts empty at offset 0.

`Restorer` is what the engine calls; `checkpoint_restorer.CheckpointRestorer` is the
store-backed one (coordinator.restore.load_cuts checks every partial against the capsule and
its manifests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.coordinator.host import VnodeCut


@dataclass(frozen=True, slots=True)
class HandoffRestore:
    """Restore from the latest committed cluster checkpoint (read when the restore runs)."""


@dataclass(frozen=True, slots=True)
class RecoveryRestore:
    """Restore from the recovery checkpoint a recovery generation names."""

    checkpoint: RecoveryCapsuleRef


@dataclass(frozen=True, slots=True)
class InitialRestore:
    """Start empty at offset 0: a recovery generation decided before any cluster checkpoint
    committed (its decision names the initial state; nothing committed exists to restore)."""


RestoreSource = HandoffRestore | RecoveryRestore | InitialRestore

# vnode -> its committed cut, or None: no committed checkpoint, start empty at offset 0
RestoredCuts = Mapping[int, VnodeCut | None]


class Restorer(Protocol):
    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        """The committed cut of every vnode in `vnodes`; raise (LaminarError) to retry later."""
        ...
