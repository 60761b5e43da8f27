"""Rendezvous (highest random weight) placement of vnodes on nodes (AS §3.1-§3.3).

`weight(v, n) = xxh3_64(le_u64(v) ‖ le_u64(n))`; each vnode goes to the peer with the highest
`(weight, node_id)`. Adding a node moves only the vnodes the newcomer now wins (about
vnode_count / (n + 1)); removing one moves only its own vnodes. Locality never affects placement
(it only feeds metrics, `placement`).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Sequence

import xxhash

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import FenceParticipant


def weight(vnode: int, node_id: int) -> int:
    """XXH3-64 (seed 0) over the 16 bytes little-endian (vnode, node id)."""
    return int(xxhash.xxh3_64_intdigest(struct.pack("<QQ", vnode, node_id)))


def rendezvous_assignment(vnode_count: int, peers: Iterable[int]) -> list[int]:
    """The owner of each vnode `0..vnode_count` among `peers` (order and duplicates ignored)."""
    candidates = sorted(set(peers))
    if not candidates:
        raise InvalidArgument("rendezvous placement needs at least one peer")
    if any(node <= 0 for node in candidates):
        raise InvalidArgument(f"node ids must be nonzero u64, got {candidates}")
    return [_owner(vnode, candidates) for vnode in range(vnode_count)]


def _owner(vnode: int, candidates: Sequence[int]) -> int:
    """The highest (weight, node id) wins; an exact weight tie goes to the larger node id."""
    return max(candidates, key=lambda node: (weight(vnode, node), node))


def moved_vnodes(before: Sequence[int], after: Sequence[int]) -> list[int]:
    """The vnodes whose owner differs between two assignments of the same length."""
    if len(before) != len(after):
        raise InvalidArgument(f"assignments differ in length: {len(before)} != {len(after)}")
    return [vnode for vnode, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]


def vnodes_per_node(owners: Sequence[int]) -> dict[int, int]:
    """How many vnodes each owner has, sorted by node id."""
    return dict(sorted(Counter(owners).items()))


def successor_participant_ids(owners: Sequence[int]) -> list[int]:
    return sorted(set(owners))


def successor_participants(
    owners: Sequence[int], available: Sequence[FenceParticipant]
) -> list[FenceParticipant]:
    """The available processes that own vnodes, in node order; every owner must be available."""
    wanted = set(owners)
    chosen = sorted((p for p in available if p.node_id in wanted), key=lambda p: p.node_id)
    if len(chosen) != len(wanted):
        raise InvalidArgument("successor owner roster lost a lease-validated process identity")
    return chosen


def retain_recovery_predecessors(
    assignment: list[int],
    predecessor_roster: Sequence[FenceParticipant],
    successor_processes: Sequence[FenceParticipant],
) -> None:
    """Give every healthy predecessor (same node and boot among the successors) at least one
    vnode, taking it from the most loaded eligible owner (AS §3.3). Mutates `assignment`."""
    live = {(p.node_id, p.boot_incarnation) for p in successor_processes}
    retained = sorted(
        p.node_id for p in predecessor_roster if (p.node_id, p.boot_incarnation) in live
    )
    retained_set = set(retained)
    counts = Counter(assignment)
    for node in retained:
        if counts[node] > 0:
            continue
        donor_index, best = None, 0
        for index, owner in enumerate(assignment):
            if owner in retained_set and counts[owner] <= 1:
                continue
            if counts[owner] > best:
                donor_index, best = index, counts[owner]
        if donor_index is None:
            raise InvalidArgument(f"recovery placement cannot retain healthy predecessor {node}")
        donor = assignment[donor_index]
        assignment[donor_index] = node
        counts[donor] -= 1
        counts[node] += 1
