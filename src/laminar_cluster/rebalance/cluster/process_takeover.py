"""Fencing one exact process incarnation by taking over its process lease (RB §1.2,
RB §2.6 `removed_process_fences`, RB §6.3 `fence_process_incarnation`; ML §8.2).

A recovery successor removes predecessor processes that cannot drain. Each removed process must
be provably unable to act again: the controller overwrites its node's lease record by
compare-and-swap with term + 1, seq + 1, a fresh owner and state `left`. The holder's own next
renewal then fails its CAS (`ProcessFenced`), and the `ProcessLeaseFence(predecessor, successor)`
is the durable evidence the recovery decision carries.

The takeover is allowed only when the record still names the boot AND the boot either left or
was observed dead: this controller's discovery saw the same liveness identity (owner, term, seq)
for at least a full ttl, and the fresh read still shows that identity. A process whose lease
was renewed is never fenced (Refused, PROCESS_RENEWED: "renewed"). The takeover record keeps
its own fence in the record's durable `takeovers` (docs/protocols/membership.md ML-11), as
every new start does.

When the node already restarted (the record names a newer boot), the evidence is the fence in the
record's `takeovers` whose predecessor is that boot: exact even when this process never observed
the boot (a restarted process fencing its own previous incarnation) and after the new boot
renewed. Only when the boot is not among them (its takeover was pushed out by 8 newer ones) is the
fence built from the newest lease of the boot this controller observed and the current record;
it must then be an immediate takeover (ML §8.2), else it is refused (Refused,
TAKEOVER_NEVER_OBSERVED or TAKEOVER_NOT_IMMEDIATE).
A node without a lease record cannot be fenced (Refused, NO_LIVE_INCARNATION).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import (
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.validate_decisions import process_fence_problem
from laminar_cluster.membership.discovery import MembershipView
from laminar_cluster.membership.paths import node_lease_path
from laminar_cluster.membership.process_lease import Stored, read_node_record
from laminar_cluster.membership.records import (
    NODE_LEASE_RECORD_VERSION,
    NodeLeaseRecord,
    NodeState,
    encode_node_record,
    with_takeover,
)
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectStore

FENCE_ATTEMPTS_MAX: Final = 4
OBSERVED_BOOTS_PER_NODE_MAX: Final = 8


@dataclass(slots=True)
class ObservedLeases:
    """The newest lease this controller saw for each (node, boot), a few boots per node."""

    _by_node: dict[int, OrderedDict[str, ProcessLease]] = field(default_factory=dict)

    def note(self, record: NodeLeaseRecord) -> None:
        lease = record.lease
        boots = self._by_node.setdefault(lease.node, OrderedDict())
        known = boots.get(lease.owner)
        if known is None or lease.seq > known.seq:
            boots[lease.owner] = lease
            boots.move_to_end(lease.owner)
        while len(boots) > OBSERVED_BOOTS_PER_NODE_MAX:
            boots.popitem(last=False)

    def newest(self, node: int, boot: str) -> ProcessLease | None:
        return self._by_node.get(node, OrderedDict()).get(boot)


def renewed_message(participant: FenceParticipant) -> str:
    return (
        f"process lease of node-{participant.node_id} boot {participant.boot_incarnation} "
        "was renewed; cannot fence it"
    )


async def fence_process(
    store: ObjectStore,
    clock: Clock,
    participant: FenceParticipant,
    view: MembershipView | None,
    observed: ObservedLeases,
    *,
    deadline: float,
) -> ProcessLeaseFence:
    """Take over `participant`'s process lease (or prove a restart did); Refused when it was
    renewed (PROCESS_RENEWED) or the evidence is not an immediate takeover (module docstring)."""
    node, boot = participant.node_id, participant.boot_incarnation
    what = f"fence process node-{node} boot {boot}"
    async with within_deadline(clock, deadline, what):
        for _ in range(FENCE_ATTEMPTS_MAX):
            stored = await read_node_record(store, node)
            if stored is None:
                raise Refused(
                    f"process lease of node-{node} is missing; cannot fence it",
                    reason=Refusal.NO_LIVE_INCARNATION,
                )
            record = stored.record
            observed.note(record)
            if record.lease.owner != boot:
                return _restarted_fence(participant, record, observed)
            if record.state is not NodeState.LEFT and not observed_dead(
                record, view, clock.monotonic()
            ):
                raise Refused(renewed_message(participant), reason=Refusal.PROCESS_RENEWED)
            candidate = _takeover_record(record, clock)
            if await _compare_and_swap(store, stored, candidate):
                observed.note(candidate)
                return candidate.takeovers[0]
            # The record changed under us: re-read and decide again.
    raise StoreUnavailable(f"{what}: did not converge in {FENCE_ATTEMPTS_MAX} attempts")


def observed_dead(record: NodeLeaseRecord, view: MembershipView | None, now_s: float) -> bool:
    """The view shows `record`'s exact liveness identity, first seen at least a ttl ago."""
    member = None if view is None else view.member(record.lease.node)
    if view is None or member is None:
        return False
    if member.record.liveness_identity() != record.liveness_identity():
        return False
    first_seen_s = view.observed_at_s - member.unchanged_s
    return now_s - first_seen_s >= record.ttl_ms / 1000


def _restarted_fence(
    participant: FenceParticipant, current: NodeLeaseRecord, observed: ObservedLeases
) -> ProcessLeaseFence:
    """The exact takeover of `participant`'s boot: from the record's durable `takeovers`, else
    from the boot's newest observed lease and the current record (module docstring)."""
    node, boot = participant.node_id, participant.boot_incarnation
    for recorded in current.takeovers:
        if recorded.predecessor.owner == boot:
            return recorded  # validated on read: canonical, of this node
    predecessor = observed.newest(node, boot)
    if predecessor is None:
        raise Refused(
            f"process lease of node-{node} boot {boot} was never observed and is not among "
            f"its recorded takeovers; the node now runs boot {current.lease.owner}; cannot "
            "fence it",
            reason=Refusal.TAKEOVER_NEVER_OBSERVED,
        )
    fence = ProcessLeaseFence(predecessor=predecessor, successor=current.lease)
    problem = process_fence_problem(fence)
    if problem is not None:
        raise Refused(
            f"process lease of node-{node} boot {boot} was superseded by boot "
            f"{current.lease.owner}, but not by an immediate takeover: {problem}",
            reason=Refusal.TAKEOVER_NOT_IMMEDIATE,
        )
    return fence


def _takeover_record(record: NodeLeaseRecord, clock: Clock) -> NodeLeaseRecord:
    """`record`'s immediate takeover (ML §8.2), state `left`, its own fence prepended (ML-11)."""
    lease = record.lease
    successor = ProcessLease(
        node=lease.node,
        owner=str(clock.uuid4()),
        term=lease.term + 1,
        seq=lease.seq + 1,
        expires_at_ms=clock.wall_ms(),
    )
    fence = ProcessLeaseFence(predecessor=lease, successor=successor)
    return NodeLeaseRecord(
        version=NODE_LEASE_RECORD_VERSION,
        lease=successor,
        state=NodeState.LEFT,
        ttl_ms=record.ttl_ms,
        nonce=str(clock.uuid4()),
        failure_domain=record.failure_domain,
        takeovers=with_takeover(fence, record.takeovers),
        report=None,  # the taken-over process reports nothing more
    )


async def _compare_and_swap(store: ObjectStore, stored: Stored, candidate: NodeLeaseRecord) -> bool:
    """True when `candidate` is durable; any doubt is settled by reading back (its owner and
    nonce are fresh, so equal bytes can only be our write)."""
    node = candidate.lease.node
    key = node_lease_path(node)
    body = encode_node_record(candidate, key=key, node=node)
    try:
        await store.put(key, body, stored.token)
        return True
    except (PreconditionFailed, ObjectNotFound, WriteOutcomeUnknown, StoreUnavailable):
        pass
    current = await read_node_record(store, node)
    return current is not None and current.record == candidate
