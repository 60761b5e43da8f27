"""The durable per-node process lease record (ML §1.3, ML §2.1, ML §2.2,
ML §2.11, ML §8.2).

One object per node id holds the current incarnation's `ProcessLease` (node, boot owner,
process term, renewal seq, diagnostic expiry), the node's announced state and the ttl it renews
under. A renewal changes `lease.seq` and `nonce`; a new start changes `lease.owner`, and
`lease.term`: these three make the liveness identity peers observe (ML-4).

`takeovers` is the durable evidence of the node's most recent incarnation changes (ML-11): the
exact ML §8.2 `ProcessLeaseFence` of each (a new start, or a leader's takeover of a dead process),
newest first, at most `NODE_TAKEOVERS_MAX`. It lets anyone fence an old boot of a restarted node
(AS §2.6 `removed_process_fences`) without having observed that boot, and after the
new boot renewed.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.codec import U64, Record, decode, encode_checked
from laminar_cluster.codec.shape import ShapeViolation, canonical_uuid
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.validate_decisions import process_fence_problem, process_lease_problem

# The widest record (8 takeovers, every integer and the failure domain at their widest) is
# about 3.6 KB.
MAX_NODE_LEASE_RECORD_BYTES: Final = 4096
NODE_TAKEOVERS_MAX: Final = 8
FAILURE_DOMAIN_CHARS_MAX: Final = 64
NODE_TTL_MS_MIN: Final = 10
NODE_TTL_MS_MAX: Final = 600_000


class NodeState(enum.Enum):
    """The announced states (ML §2.2). `suspected` and `dead` are never written: an observer
    derives them (`discovery`)."""

    JOINING = "joining"
    ACTIVE = "active"
    DRAINING = "draining"
    LEFT = "left"


# ML-6: a node's announced state only moves forward along this order within one term.
STATE_ORDER: Final = {
    NodeState.JOINING: 0,
    NodeState.ACTIVE: 1,
    NodeState.DRAINING: 2,
    NodeState.LEFT: 3,
}


class NodeLeaseRecord(Record):
    """`membership/nodes/node={id:020}/lease.json`."""

    version: Literal[1]
    lease: ProcessLease
    state: NodeState
    ttl_ms: U64
    nonce: str
    failure_domain: str | None
    takeovers: tuple[ProcessLeaseFence, ...]

    def liveness_identity(self) -> tuple[str, int, int]:
        """Equal identities mean no renewal and no new start happened in between (ML-4)."""
        return (self.lease.owner, self.lease.term, self.lease.seq)


def node_record_problem(record: NodeLeaseRecord, node: int) -> str | None:
    """Why `record` is not a valid record of `node`, or None (run before writes, after reads)."""
    problem = process_lease_problem(record.lease, node)
    if problem is not None:
        return problem
    if record.lease.term > U64_MAX or record.lease.seq > U64_MAX:
        return "process lease term or seq exceeds u64"
    if not NODE_TTL_MS_MIN <= record.ttl_ms <= NODE_TTL_MS_MAX:
        return f"ttl {record.ttl_ms} ms is outside [{NODE_TTL_MS_MIN}, {NODE_TTL_MS_MAX}] ms"
    try:
        canonical_uuid(record.nonce, "nonce")
    except ShapeViolation as error:
        return str(error)
    domain = record.failure_domain
    if domain is not None and not 0 < len(domain) <= FAILURE_DOMAIN_CHARS_MAX:
        return f"failure domain is {len(domain)} chars; 1 to {FAILURE_DOMAIN_CHARS_MAX} allowed"
    return takeovers_problem(record, node)


def with_takeover(
    fence: ProcessLeaseFence, previous: tuple[ProcessLeaseFence, ...]
) -> tuple[ProcessLeaseFence, ...]:
    """The takeovers of a record written by the incarnation change `fence` over a record whose
    takeovers were `previous`: newest first, the oldest beyond the limit dropped (ML-11)."""
    return (fence, *previous[: NODE_TAKEOVERS_MAX - 1])


def takeovers_problem(record: NodeLeaseRecord, node: int) -> str | None:
    """ML-11: at most 8 canonical ML §8.2 fences of `node`, strictly newest first by successor
    term, the newest no newer than the record's own lease (same owner, seq not ahead, when it
    has the lease's term)."""
    takeovers = record.takeovers
    if len(takeovers) > NODE_TAKEOVERS_MAX:
        return f"{len(takeovers)} takeovers recorded; at most {NODE_TAKEOVERS_MAX} allowed"
    newer_term: int | None = None
    for index, fence in enumerate(takeovers):
        if fence.predecessor.node != node:
            return f"takeover {index} is of node {fence.predecessor.node}, not node {node}"
        problem = process_fence_problem(fence)
        if problem is not None:
            return f"takeover {index}: {problem}"
        term = fence.successor.term
        if newer_term is not None and term >= newer_term:
            return f"takeover {index} (term {term}) is not older than the one before it"
        newer_term = term
    if not takeovers:
        return None
    newest, lease = takeovers[0].successor, record.lease
    if newest.term > lease.term:
        return f"newest takeover (term {newest.term}) is newer than the lease (term {lease.term})"
    if newest.term == lease.term and newest.owner != lease.owner:
        return f"newest takeover names another owner of the lease's term {lease.term}"
    if newest.term == lease.term and newest.seq > lease.seq:
        return f"newest takeover (seq {newest.seq}) is ahead of the lease (seq {lease.seq})"
    return None


def encode_node_record(record: NodeLeaseRecord, *, key: str, node: int) -> bytes:
    """Validate, then encode canonically; a bad record is our bug or bad input: never written."""
    problem = node_record_problem(record, node)
    if problem is not None:
        raise InvalidArgument(f"{key}: {problem}")
    return encode_checked(record, what=key, max_bytes=MAX_NODE_LEASE_RECORD_BYTES)


def decode_node_record(body: bytes, *, key: str, node: int) -> NodeLeaseRecord:
    """Strict canonical decode plus validation; anything else is CorruptRecord, never trusted."""
    record = decode(body, NodeLeaseRecord, key=key, max_bytes=MAX_NODE_LEASE_RECORD_BYTES)
    problem = node_record_problem(record, node)
    if problem is not None:
        raise CorruptRecord(f"{key}: {problem}", key=key)
    return record
