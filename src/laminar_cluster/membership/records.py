"""The durable per-node process lease record (ML §1.3, ML §2.1, ML §2.2,
ML §2.11, ML §8.2).

One object per node id holds the current incarnation's `ProcessLease` (node, boot owner,
process term, renewal seq, diagnostic expiry), the node's announced state and the ttl it renews
under. A renewal changes `lease.seq` and `nonce`; a new start changes `lease.owner`, and
`lease.term`: these three make the liveness identity peers observe (ML-4).

`report` (version 2) is what the node tells operators on every renewal, at no extra request:
its cumulative store requests by kind since the process began counting (with the monotonic
milliseconds they cover, so a reader computes a rate from two renewals without trusting any
wall clock), the assignment version its engine runs, the vnodes it is still restoring, and
`quiescent_through`: the checkpoint id of its last committed cut when nothing changed since
(None otherwise; docs/protocols/distributed-checkpoint.md DC-21: the checkpoint leader skips a
periodic checkpoint while every participant reports the last Commit), and `job`: a job's late
events and dead letters in the vnodes the node holds (None when it runs no job). Apart from
`quiescent_through`, which only lets the leader skip work, nothing in the protocol reads it;
`views` and the console do. A version 1 record (no report) still decodes, as version 2 with
`report` None, and a version 2 report written before `quiescent_through` or `job` existed
decodes with them None.

`takeovers` is the durable evidence of the node's most recent incarnation changes (ML-11): the
exact ML §8.2 `ProcessLeaseFence` of each (a new start, or a leader's takeover of a dead process),
newest first, at most `NODE_TAKEOVERS_MAX`. It lets anyone fence an old boot of a restarted node
(AS §2.6 `removed_process_fences`) without having observed that boot, and after the
new boot renewed.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from typing import Final, Literal

import msgspec

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.codec import U16, U32, U64, Record, decode, encode_checked
from laminar_cluster.codec.shape import ShapeViolation, canonical_uuid
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.validate_decisions import process_fence_problem, process_lease_problem

# The widest version 1 record (8 takeovers, every integer and the failure domain at their
# widest) is about 3.6 KB; version 2 with a report listing 256 five-digit vnodes (and a job's
# figures) is 4,598 bytes.
MAX_NODE_LEASE_RECORD_BYTES: Final = 8192
NODE_LEASE_RECORD_VERSION: Final = 2
# The restoring vnodes a report lists (all of them up to this many; the count is always exact).
REPORT_RESTORING_VNODES_MAX: Final = 256
NODE_TAKEOVERS_MAX: Final = 8
FAILURE_DOMAIN_CHARS_MAX: Final = 64
NODE_TTL_MS_MIN: Final = 10
NODE_TTL_MS_MAX: Final = 600_000
# ML-8: at most this many node lease objects (and roster entries).
MEMBERSHIP_NODES_MAX: Final = 1024
ROSTER_RECORD_VERSION: Final = 1
# 1,024 ids of 20 digits with their commas and the envelope are about 21.5 KB.
MAX_ROSTER_RECORD_BYTES: Final = 32_768


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


class StoreRequestCounts(Record):
    """Store requests of one process by kind, cumulative since it began counting
    `counted_ms` milliseconds ago on its own monotonic clock."""

    get: U64
    head: U64
    put: U64
    list: U64
    delete: U64
    counted_ms: U64


class JobReport(Record):
    """A job's figures in the vnodes a node holds now (they move with the vnodes' state, so
    the sum over the nodes is the job's): events too late for their windows, and dead letters
    (events that could not be parsed or whose step raised)."""

    late_events: U64
    dead_letters: U64


class NodeReport(Record):
    """What a node tells operators with each renewal (module docstring)."""

    requests: StoreRequestCounts
    assignment_version: U64
    restoring_count: U32
    restoring: tuple[U16, ...]  # ascending; the first REPORT_RESTORING_VNODES_MAX of them
    # DC-21: the last committed checkpoint after which nothing changed here (None: busy).
    quiescent_through: U64 | None = None
    job: JobReport | None = None  # None: the node runs no job


class NodeReportBefore16(Record):
    """A report written before `job` existed. Read, never written."""

    requests: StoreRequestCounts
    assignment_version: U64
    restoring_count: U32
    restoring: tuple[U16, ...]
    quiescent_through: U64 | None = None

    def upgraded(self) -> NodeReport:
        return NodeReport(**msgspec.structs.asdict(self))


class NodeReportBefore15(Record):
    """A report written before `quiescent_through` existed. Read, never written."""

    requests: StoreRequestCounts
    assignment_version: U64
    restoring_count: U32
    restoring: tuple[U16, ...]

    def upgraded(self) -> NodeReport:
        return NodeReport(**msgspec.structs.asdict(self))


class NodeLeaseRecord(Record):
    """`membership/nodes/node={id:020}/lease.json` (version 2)."""

    version: Literal[2]
    lease: ProcessLease
    state: NodeState
    ttl_ms: U64
    nonce: str
    failure_domain: str | None
    takeovers: tuple[ProcessLeaseFence, ...]
    report: NodeReport | None

    def liveness_identity(self) -> tuple[str, int, int]:
        """Equal identities mean no renewal and no new start happened in between (ML-4)."""
        return (self.lease.owner, self.lease.term, self.lease.seq)


class NodeLeaseRecordBefore16(Record):
    """A version 2 record whose report has no `job`. Read, never written."""

    version: Literal[2]
    lease: ProcessLease
    state: NodeState
    ttl_ms: U64
    nonce: str
    failure_domain: str | None
    takeovers: tuple[ProcessLeaseFence, ...]
    report: NodeReportBefore16 | None


class NodeLeaseRecordBefore15(Record):
    """A version 2 record whose report has no `quiescent_through`. Read, never written."""

    version: Literal[2]
    lease: ProcessLease
    state: NodeState
    ttl_ms: U64
    nonce: str
    failure_domain: str | None
    takeovers: tuple[ProcessLeaseFence, ...]
    report: NodeReportBefore15 | None


class NodeLeaseRecordV1(Record):
    """The version 1 record: version 2 without `report`. Read, never written."""

    version: Literal[1]
    lease: ProcessLease
    state: NodeState
    ttl_ms: U64
    nonce: str
    failure_domain: str | None
    takeovers: tuple[ProcessLeaseFence, ...]


OlderNodeLeaseRecord = NodeLeaseRecordBefore16 | NodeLeaseRecordBefore15 | NodeLeaseRecordV1
OLDER_NODE_LEASE_RECORDS: Final[tuple[type[OlderNodeLeaseRecord], ...]] = (
    NodeLeaseRecordBefore16,
    NodeLeaseRecordBefore15,
    NodeLeaseRecordV1,
)  # newest first: the order `decode_node_record` tries them in


def upgraded(older: OlderNodeLeaseRecord) -> NodeLeaseRecord:
    """An older record as the current shape: the fields it lacks are None."""
    fields = msgspec.structs.asdict(older)
    report = fields.pop("report", None)
    fields["version"] = NODE_LEASE_RECORD_VERSION
    return NodeLeaseRecord(**fields, report=None if report is None else report.upgraded())


class MembershipRoster(Record):
    """`membership/roster.json` (version 1): the ids of the nodes that joined with a lease
    record, strictly ascending (ML-14). Only grows: a writer adds its own id."""

    version: Literal[1]
    nodes: tuple[U64, ...]


def roster_problem(roster: MembershipRoster, nodes_max: int) -> str | None:
    """Why `roster` is not valid: ids nonzero u64, strictly ascending, at most `nodes_max`."""
    nodes = roster.nodes
    if len(nodes) > nodes_max:
        return f"roster lists {len(nodes)} nodes; at most {nodes_max} allowed"
    if any(not 0 < node <= U64_MAX for node in nodes):
        return "roster lists a node id that is not a nonzero u64"
    if any(a >= b for a, b in itertools.pairwise(nodes)):
        return "roster's node ids are not strictly ascending"
    return None


def encode_roster(roster: MembershipRoster, *, key: str) -> bytes:
    """Validate, then encode canonically (a bad roster is never written)."""
    problem = roster_problem(roster, MEMBERSHIP_NODES_MAX)
    if problem is not None:
        raise InvalidArgument(f"{key}: {problem}")
    return encode_checked(roster, what=key, max_bytes=MAX_ROSTER_RECORD_BYTES)


def decode_roster(
    body: bytes, *, key: str, nodes_max: int = MEMBERSHIP_NODES_MAX
) -> MembershipRoster:
    """Strict canonical decode plus validation; anything else is CorruptRecord (ML-10)."""
    roster = decode(body, MembershipRoster, key=key, max_bytes=MAX_ROSTER_RECORD_BYTES)
    problem = roster_problem(roster, nodes_max)
    if problem is not None:
        raise CorruptRecord(f"{key}: {problem}", key=key)
    return roster


def node_report(
    requests: Mapping[str, int],
    counted_s: float,
    assignment_version: int,
    restoring: Iterable[int],
    quiescent_through: int | None = None,
    job: JobReport | None = None,
) -> NodeReport:
    """A report from a request counter by kind (`store.counting.CountingStore.requests`)."""
    ordered = sorted(restoring)
    return NodeReport(
        requests=StoreRequestCounts(
            get=requests.get("get", 0),
            head=requests.get("head", 0),
            put=requests.get("put", 0),
            list=requests.get("list", 0),
            delete=requests.get("delete", 0),
            counted_ms=max(0, round(counted_s * 1000)),
        ),
        assignment_version=assignment_version,
        restoring_count=len(ordered),
        restoring=tuple(ordered[:REPORT_RESTORING_VNODES_MAX]),
        quiescent_through=quiescent_through,
        job=job,
    )


def report_problem(report: NodeReport | None) -> str | None:
    """The restoring list holds exactly the first min(count, bound) vnodes, strictly
    ascending."""
    if report is None:
        return None
    listed, count = report.restoring, report.restoring_count
    if len(listed) != min(REPORT_RESTORING_VNODES_MAX, count):
        return f"report lists {len(listed)} restoring vnodes for a count of {count}"
    if any(a >= b for a, b in itertools.pairwise(listed)):
        return "report's restoring vnodes are not strictly ascending"
    return None


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
    return report_problem(record.report) or takeovers_problem(record, node)


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
    """Strict canonical decode plus validation; anything else is CorruptRecord, never trusted.
    A version 1 record decodes as version 2 without a report; a version 2 record written before
    `quiescent_through` or `job` existed decodes with them None (each older shape is tried only
    after the current one failed, and must itself be canonical)."""
    try:
        record = decode(body, NodeLeaseRecord, key=key, max_bytes=MAX_NODE_LEASE_RECORD_BYTES)
    except CorruptRecord as error:
        record = _decode_older(body, key=key, error=error)
    problem = node_record_problem(record, node)
    if problem is not None:
        raise CorruptRecord(f"{key}: {problem}", key=key)
    return record


def _decode_older(body: bytes, *, key: str, error: CorruptRecord) -> NodeLeaseRecord:
    """`body` as one of the older shapes, upgraded; else the current shape's `error`."""
    for shape in OLDER_NODE_LEASE_RECORDS:
        try:
            older = decode(body, shape, key=key, max_bytes=MAX_NODE_LEASE_RECORD_BYTES)
        except CorruptRecord:
            continue
        return upgraded(older)
    raise error from None
