"""The state one decision-store instance keeps (CD §2.2), shared by its operation modules.

Per instance, never shared: the metadata lock (serializes identity creation and ID allocation in
this instance), the cached deployment id (set once, never cleared), the cached allocation head
and the local reservation cursor. Per namespace in a process: the namespace lock of local mode,
which serializes read-compare-overwrite transitions of instances opened on the same directory.
It gives no cross-process exclusion: the single-writer guarantee of local mode is the caller's.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from laminar_cluster.checkpoint.reader import Loaded
from laminar_cluster.checkpoint.records import AllocatorMode, DeploymentIdentity
from laminar_cluster.clock import Clock
from laminar_cluster.store import ObjectStore

_NAMESPACE_LOCKS: weakref.WeakValueDictionary[object, asyncio.Lock] = weakref.WeakValueDictionary()


def namespace_lock(key: object) -> asyncio.Lock:
    """The process-wide lock of one namespace: the same object for every instance on `key`."""
    lock = _NAMESPACE_LOCKS.get(key)
    if lock is None:
        lock = asyncio.Lock()
        _NAMESPACE_LOCKS[key] = lock
    return lock


@dataclass
class LocalReservation:
    """Local mode's in-memory cursor inside the block this instance claimed."""

    initialized: bool = False
    highest_block: int | None = None
    next_id: int | None = None
    block_end: int = 0


@dataclass
class DecisionContext:
    store: ObjectStore
    clock: Clock
    mode: AllocatorMode
    namespace_lock: asyncio.Lock | None = None
    metadata_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    deployment_id: str | None = None
    cached_head: Loaded[DeploymentIdentity] | None = None
    local: LocalReservation = field(default_factory=LocalReservation)

    @property
    def native_cas(self) -> bool:
        return self.mode is AllocatorMode.NATIVE_CAS
