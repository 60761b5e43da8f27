"""Where newly owned vnodes restore from (DC §3.4, DC §1.10), and the `Restorer` that fetches
their cuts for the `VnodeHost`.

A vnode is restored from the partials of one committed attempt: its state and the next offset
of each of its partitions. A handoff (a plain adoption acquiring vnodes) restores from the
latest committed cluster checkpoint, read when the restore runs: it is the pre-rotation
checkpoint or a later one, and none can commit under a fence that gives us the vnode while we
still restore it (our cut would be missing). A recovery generation restores from the recovery
checkpoint it names, or starts empty when the generation restores the initial state. With no
committed checkpoint at all a vnode starts empty at offset 0.

`runtime.checkpoint_restorer.CheckpointRestorer` is the store-backed `Restorer`
(coordinator.restore.load_cuts checks every partial against the capsule and its manifests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.rebalance.engine.data_plane import VnodeCut
from laminar_cluster.rebalance.interfaces import InitialState, RecoveryCut


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


@dataclass(frozen=True, slots=True)
class PendingRestore:
    """A restoring vnode's source and generation (a restore finishing after its vnode restarted
    or left carries an older generation and is discarded)."""

    source: RestoreSource
    generation: int


# vnode -> its committed cut, or None: no committed checkpoint, start empty at offset 0
RestoredCuts = Mapping[int, VnodeCut | None]


def restore_source(cut: RecoveryCut | None) -> RestoreSource:
    """Where a recovery generation restores from: its checkpoint, or empty for the initial
    state; a handoff (the latest committed checkpoint) when it names none."""
    if isinstance(cut, InitialState):
        return InitialRestore()
    if cut is not None:
        return RecoveryRestore(cut)
    return HandoffRestore()


class Restorer(Protocol):
    """Fetches committed cuts (the host calls it from its restore loop)."""

    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        """The committed cut of every vnode in `vnodes`; raise (LaminarError) to retry later."""
        ...
