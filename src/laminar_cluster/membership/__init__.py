"""Membership: per-process leases on the store and discovery of peers from them
(ML §1.3, ML §2.1, ML §2.2, ML §2.11, ML §8.2, ML §4.3.4;
docs/protocols/membership.md)."""

from laminar_cluster.membership.discovery import (
    Discovery,
    Member,
    MembershipView,
    ObservedState,
)
from laminar_cluster.membership.leave import activate, keep_renewed, leave, wait_until_drained
from laminar_cluster.membership.paths import node_lease_path, parse_node_lease_path
from laminar_cluster.membership.process_lease import (
    AcquiredLease,
    ProcessFenced,
    ProcessLeaseHolder,
    read_node_record,
)
from laminar_cluster.membership.records import NodeLeaseRecord, NodeState

__all__ = [
    "AcquiredLease",
    "Discovery",
    "Member",
    "MembershipView",
    "NodeLeaseRecord",
    "NodeState",
    "ObservedState",
    "ProcessFenced",
    "ProcessLeaseHolder",
    "activate",
    "keep_renewed",
    "leave",
    "node_lease_path",
    "parse_node_lease_path",
    "read_node_record",
    "wait_until_drained",
]
