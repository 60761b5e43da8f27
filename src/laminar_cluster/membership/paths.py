"""Object paths of membership (ML §1.3, ML §1.11): one lease object per node id,
`membership/nodes/node={id:020}/lease.json`, and the roster `membership/roster.json` (ML-14).
The lease record is also the node's start counter: the process term of a new start is the
stored term + 1, written by compare-and-swap (ML-1).
"""

from __future__ import annotations

import re
from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.errors import CorruptRecord, InvalidArgument

NODES_PREFIX: Final = "membership/nodes/"
# ML-14: the ids of the nodes that joined; outside NODES_PREFIX, so the listing never sees it.
ROSTER_PATH: Final = "membership/roster.json"

_NODE_LEASE = re.compile(r"membership/nodes/node=([0-9]{20})/lease\.json")


def node_lease_path(node: int) -> str:
    if not 0 < node <= U64_MAX:
        raise InvalidArgument(f"node id {node} is not a nonzero u64")
    return f"{NODES_PREFIX}node={node:020d}/lease.json"


def parse_node_lease_path(path: str) -> int:
    """The node id of a lease path; re-formats and compares, so only canonical keys parse."""
    match = _NODE_LEASE.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not a canonical node lease path", key=path)
    node = int(match.group(1))
    if not 0 < node <= U64_MAX or node_lease_path(node) != path:
        raise CorruptRecord(f"{path}: not a canonical node lease path", key=path)
    return node
