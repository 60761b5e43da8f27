"""`VnodeTable`: which vnodes the engine runs and where each of their source partitions stands
(DC §3.1, DC §3.2, DC §3.4, DC §3.5). Pure bookkeeping: no I/O, no awaits.

* Partition p belongs to vnode `p % vnode_count` (256 in production; the registry's count).
* An owned vnode is either *active* (each of its partitions has a next offset and is consumed)
  or *restoring* (waiting for its state and offsets from a committed checkpoint; it neither
  processes nor emits). Each restore carries a generation, so a restore that finishes after
  the ownership moved on is discarded.
* *Paused* vnodes (revoking in a prepared source drain, DC §3.5) stay active (they are cut and
  emit) but are not consumed.
* The partition count may be learned late (the producer declares it): `set_partitions` adds
  the new partitions of active vnodes at offset 0. Offsets a restored cut names are kept even
  for partitions this table does not know yet.
* `next_reads(n)` hands out up to n consumable partitions round-robin.
* *Untouched* vnodes are active vnodes restored empty (no state) to which no batch has been
  applied since: their state is the empty state and every offset is 0, so a cut writes no
  partial for them (DC-15).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from laminar_cluster.assignment.digest import fence_matches_owner_map
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.runtime.restoring import RestoreSource


@dataclass(frozen=True, slots=True)
class PendingRestore:
    source: RestoreSource
    generation: int


def revoking_vnodes(
    owned: frozenset[int],
    me: FenceParticipant,
    target: CheckpointAssignmentFence,
    target_owners: Sequence[int] | None,
) -> frozenset[int] | None:
    """The owned vnodes a drain to `target` takes from this boot (DC §3.5): all of them when the
    target does not certify this boot; None when the target's owner map is unknown or does not
    match `target` (the caller then pauses every owned vnode, which is always safe)."""
    if target.participant_incarnation(me.node_id) != me.boot_incarnation:
        return owned
    if target_owners is None or not fence_matches_owner_map(target, target_owners):
        return None
    return frozenset(v for v in owned if v >= len(target_owners) or target_owners[v] != me.node_id)


class VnodeTable:
    def __init__(self, partitions: int = 0) -> None:
        if partitions < 0:
            raise InvalidArgument(f"source partitions: {partitions} is negative")
        self.partitions = partitions
        self.vnode_count = 0
        self.owned: frozenset[int] = frozenset()
        self.offsets: dict[int, int] = {}  # partition -> next offset (active vnodes only)
        self.restoring: dict[int, PendingRestore] = {}
        self.paused: frozenset[int] = frozenset()
        self.untouched: set[int] = set()
        self._generations = itertools.count(1)
        self._cursor = 0
        self._consumable: list[int] | None = None

    # -- reads ---------------------------------------------------------------------------------
    def vnode_of(self, partition: int) -> int:
        return partition % self.vnode_count

    def partitions_of(self, vnode: int) -> range:
        return range(vnode, self.partitions, self.vnode_count) if self.vnode_count else range(0)

    def active(self) -> tuple[int, ...]:
        return tuple(sorted(self.owned - self.restoring.keys()))

    def cut_offsets(self) -> dict[int, dict[int, int]]:
        """Every active vnode's `partition -> next offset` (empty for a vnode without any)."""
        cut: dict[int, dict[int, int]] = {vnode: {} for vnode in self.active()}
        for partition, offset in sorted(self.offsets.items()):
            cut[self.vnode_of(partition)][partition] = offset
        return cut

    def paused_partitions(self) -> tuple[int, ...]:
        return tuple(sorted(p for p in self.offsets if self.vnode_of(p) in self.paused))

    def consumable(self) -> list[int]:
        if self._consumable is None:
            paused = self.paused
            self._consumable = sorted(p for p in self.offsets if self.vnode_of(p) not in paused)
        return self._consumable

    def next_reads(self, count: int) -> list[tuple[int, int]]:
        """Up to `count` distinct consumable partitions with their next offsets, round-robin."""
        partitions = self.consumable()
        if not partitions:
            return []
        taken = min(count, len(partitions))
        start = self._cursor % len(partitions)
        self._cursor = start + taken
        chosen = [partitions[(start + i) % len(partitions)] for i in range(taken)]
        return [(p, self.offsets[p]) for p in chosen]

    # -- ownership -----------------------------------------------------------------------------
    def adopt(
        self, vnode_count: int, owned: Iterable[int], acquired: Iterable[int], source: RestoreSource
    ) -> tuple[int, ...]:
        """Run `owned`: vnodes no longer owned are forgotten (returned); `acquired` ones, and
        any this table did not hold, restore from `source`."""
        self._set_vnode_count(vnode_count)
        owned = frozenset(owned)
        dropped = tuple(sorted(self.owned - owned))
        for vnode in dropped:
            self._forget(vnode)
        new = (owned - self.owned) | (frozenset(acquired) & owned)
        self.owned = owned
        self.paused &= owned
        for vnode in sorted(new):
            self._start_restore(vnode, source)
        self._consumable = None
        return dropped

    def restart_all(
        self, vnode_count: int, owned: Iterable[int], source: RestoreSource
    ) -> tuple[int, ...]:
        """A recovery generation: every owned vnode restores cold; returns every vnode held."""
        held = self.clear()
        self._set_vnode_count(vnode_count)
        self.owned = frozenset(owned)
        for vnode in sorted(self.owned):
            self._start_restore(vnode, source)
        return held

    def clear(self) -> tuple[int, ...]:
        """Forget every vnode (a fault); returns the vnodes that were held."""
        held = tuple(sorted(self.owned))
        self.owned = frozenset()
        self.offsets.clear()
        self.restoring.clear()
        self.untouched.clear()
        self.paused = frozenset()
        self._consumable = None
        return held

    def finish_restore(
        self, vnode: int, pending: PendingRestore, offsets: Mapping[int, int], *, empty: bool
    ) -> bool:
        """Activate `vnode` at `offsets` (its other partitions start at 0) if `pending` is
        still its restore, `empty` when it was restored without state; CorruptRecord for an
        offset of another vnode's partition (or any offset above 0 of an empty restore)."""
        if empty and any(offset != 0 for offset in offsets.values()):
            raise CorruptRecord(f"restore of vnode {vnode}: no state but offsets above 0")
        if self.restoring.get(vnode) != pending:
            return False
        for partition, offset in offsets.items():
            if partition < 0 or offset < 0 or partition % self.vnode_count != vnode:
                raise CorruptRecord(
                    f"restore of vnode {vnode}: offset {offset} for partition {partition}, which "
                    f"is not one of its partitions ({self.vnode_count} vnodes)"
                )
        del self.restoring[vnode]
        for partition in self.partitions_of(vnode):
            self.offsets[partition] = 0
        self.offsets.update(offsets)
        if empty:
            self.untouched.add(vnode)
        self._consumable = None
        return True

    def set_partitions(self, partitions: int) -> None:
        """The log has `partitions` partitions: active vnodes start the new ones at 0."""
        if partitions <= self.partitions:
            return
        self.partitions = partitions
        if self.vnode_count:
            for vnode in self.active():
                for partition in self.partitions_of(vnode):
                    self.offsets.setdefault(partition, 0)
        self._consumable = None

    def pause(self, vnodes: Iterable[int]) -> None:
        self.paused = frozenset(vnodes) & self.owned
        self._consumable = None

    def resume(self) -> None:
        self.paused = frozenset()
        self._consumable = None

    # -- internals -----------------------------------------------------------------------------
    def _set_vnode_count(self, vnode_count: int) -> None:
        if vnode_count <= 0:
            raise InvalidArgument(f"vnode count {vnode_count} is not positive")
        if self.vnode_count not in (0, vnode_count) and self.owned:
            raise InvalidArgument(
                f"vnode count {vnode_count} differs from the {self.vnode_count} this table runs"
            )
        self.vnode_count = vnode_count

    def _forget(self, vnode: int) -> None:
        self.restoring.pop(vnode, None)
        self.untouched.discard(vnode)
        for partition in [p for p in self.offsets if self.vnode_of(p) == vnode]:
            del self.offsets[partition]

    def _start_restore(self, vnode: int, source: RestoreSource) -> None:
        self._forget(vnode)
        self.restoring[vnode] = PendingRestore(source, next(self._generations))
