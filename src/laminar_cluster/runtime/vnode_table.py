"""`VnodeTable`: where the source partitions of `StreamEngine`'s running vnodes stand (DC §3.1,
DC §3.2, DC §3.4, RB §2.8). Pure bookkeeping: no I/O, no awaits. Which vnodes run and which
restore is the host's (rebalance/engine/vnode_host.py); the table only follows its calls.

* Partition p belongs to vnode `p % vnode_count` (256 in production; the registry's count).
* A running (*active*) vnode has a next offset for each of its partitions and is consumed,
  unless it is *paused* (revoking in a prepared source drain): paused vnodes are still cut.
* The partition count may be learned late (the producer declares it): `set_partitions` adds
  the new partitions of active vnodes at offset 0. Offsets a restored cut names are kept even
  for partitions this table does not know yet.
* `next_reads(n)` hands out up to n consumable partitions round-robin.
* *Untouched* vnodes are active vnodes restored empty (no state) to which no batch has been
  applied since: their state is the empty state and every offset is 0, so a cut writes no
  partial for them (DC-15).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from laminar_cluster.errors import CorruptRecord, InvalidArgument


class VnodeTable:
    """The partitions of the running vnodes and their next offsets (module docstring)."""

    def __init__(self, partitions: int = 0) -> None:
        if partitions < 0:
            raise InvalidArgument(f"source partitions: {partitions} is negative")
        self.partitions = partitions
        self.vnode_count = 0
        self.active: set[int] = set()
        self.offsets: dict[int, int] = {}  # partition -> next offset (active vnodes only)
        self.paused: frozenset[int] = frozenset()
        self.untouched: set[int] = set()
        self._cursor = 0
        self._consumable: list[int] | None = None

    # -- reads ---------------------------------------------------------------------------------
    def vnode_of(self, partition: int) -> int:
        return partition % self.vnode_count

    def partitions_of(self, vnode: int) -> range:
        return range(vnode, self.partitions, self.vnode_count) if self.vnode_count else range(0)

    def cut_offsets(self, vnodes: Iterable[int]) -> dict[int, dict[int, int]]:
        """Each of `vnodes`' (all active) `partition -> next offset` (empty without any)."""
        cut: dict[int, dict[int, int]] = {}
        for vnode in vnodes:
            if vnode not in self.active:
                raise InvalidArgument(f"vnode {vnode} is not running; it cannot be cut")
            cut[vnode] = {}
        for partition, offset in sorted(self.offsets.items()):
            vnode = self.vnode_of(partition)
            if vnode in cut:
                cut[vnode][partition] = offset
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

    # -- the host's calls ----------------------------------------------------------------------
    def check_restore(self, vnode: int, offsets: Mapping[int, int], vnode_count: int) -> None:
        """InvalidArgument for another vnode count than the active vnodes'; CorruptRecord for
        an offset of another vnode's partition."""
        if vnode_count <= 0 or vnode < 0 or vnode >= vnode_count:
            raise InvalidArgument(f"vnode {vnode} of {vnode_count} vnodes")
        if self.vnode_count not in (0, vnode_count) and self.active - {vnode}:
            raise InvalidArgument(
                f"vnode count {vnode_count} differs from the {self.vnode_count} this table runs"
            )
        for partition, offset in offsets.items():
            if partition < 0 or offset < 0 or partition % vnode_count != vnode:
                raise CorruptRecord(
                    f"restore of vnode {vnode}: offset {offset} for partition {partition}, which "
                    f"is not one of its partitions ({vnode_count} vnodes)"
                )

    def restore(
        self, vnode: int, offsets: Mapping[int, int], *, empty: bool, vnode_count: int
    ) -> None:
        """Activate `vnode` at `offsets` (its other partitions start at 0), `empty` when it was
        restored without state (`check_restore` first)."""
        self.check_restore(vnode, offsets, vnode_count)
        self.drop(vnode)
        self.vnode_count = vnode_count
        self.active.add(vnode)
        for partition in self.partitions_of(vnode):
            self.offsets[partition] = 0
        self.offsets.update(offsets)
        if empty:
            self.untouched.add(vnode)

    def drop(self, vnode: int) -> None:
        """Stop consuming `vnode` and forget its offsets."""
        self.active.discard(vnode)
        self.untouched.discard(vnode)
        for partition in [p for p in self.offsets if self.vnode_of(p) == vnode]:
            del self.offsets[partition]
        self._consumable = None

    def pause(self, vnodes: Iterable[int]) -> None:
        self.paused = frozenset(vnodes)
        self._consumable = None

    def set_partitions(self, partitions: int) -> None:
        """The log has `partitions` partitions: active vnodes start the new ones at 0."""
        if partitions <= self.partitions:
            return
        self.partitions = partitions
        if self.vnode_count:
            for vnode in sorted(self.active):
                for partition in self.partitions_of(vnode):
                    self.offsets.setdefault(partition, 0)
        self._consumable = None
