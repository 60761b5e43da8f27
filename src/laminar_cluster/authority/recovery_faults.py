"""Recovery faults admitted through the leader authority log (LA §3.7, LA §4.6.1,
LA §4.6.2; invariant LA-16; quirk LA §11.4).

Any participant process may report a fault, under whatever term is current: no leader proof is
needed. A fault append copies the lease unchanged but for `seq` (LA §3.3), so the liveness identity
(owner, token, renewal_sequence) is untouched and a rival's takeover observation is never reset
by it (LA §4.3.4).

One slot per stable node id, sorted by node id. A slot's `fault_sequence` is the authority
sequence that admitted its current request: globally monotone and never reused, even after its
tombstone is compacted (LA-16). Inactive slots are tombstones left by a release, so a retry of the
cleared request answers `AlreadyCleared` instead of being re-admitted.

A fault is admitted by `admission.admit` without a proof: bounded by
AUTHORITY_MUTATION_ATTEMPTS_MAX (then Contended) and the caller's absolute monotonic `deadline`
(DeadlineExceeded).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import msgspec

from laminar_cluster.authority import admission
from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import Fenced, InvalidArgument
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import (
    AuthorityRecoveryFaultSlot,
    LeaderAuthorityRecord,
    RecoveryFault,
    RecoveryFaultPublisher,
)
from laminar_cluster.lease.validate import validate_fault_publisher


@dataclass(frozen=True)
class Active:
    """The exact (publisher, request) is admitted and its slot is active."""


@dataclass(frozen=True)
class AlreadyCleared:
    """The exact (publisher, request) was admitted and then cleared by a committed release."""


@dataclass(frozen=True)
class CoveredByNewerRequest:
    """The same process already reported a newer request; nothing was written."""


@dataclass(frozen=True)
class Superseded:
    """A newer process term of the same node already reported; nothing was written."""


RecordRecoveryFaultResult = Active | AlreadyCleared | CoveredByNewerRequest | Superseded


@dataclass(frozen=True)
class RecoveryFaultInventory:
    """`{revision, faults}` (LA §3.7): the authority sequence that last changed the slot set (0 =
    no fault ever recorded) and the active slots as (reporter node, fault_sequence), by node."""

    revision: int
    faults: tuple[RecoveryFault, ...]


def fault_inventory_of(record: LeaderAuthorityRecord) -> RecoveryFaultInventory:
    return RecoveryFaultInventory(
        revision=record.recovery_fault_revision,
        faults=tuple(
            RecoveryFault(reporter=slot.publisher.participant.node_id, sequence=slot.fault_sequence)
            for slot in record.recovery_fault_slots
            if slot.active
        ),
    )


def fault_slot_of(
    slots: tuple[AuthorityRecoveryFaultSlot, ...], node_id: int
) -> AuthorityRecoveryFaultSlot | None:
    """The slot of `node_id` in `slots` (strictly sorted by node id, checked by validation)."""
    index = bisect.bisect_left(slots, node_id, key=lambda slot: slot.publisher.participant.node_id)
    if index < len(slots) and slots[index].publisher.participant.node_id == node_id:
        return slots[index]
    return None


async def recovery_fault_inventory(authority: LeaderLeaseStore) -> RecoveryFaultInventory:
    """The fault inventory of the published head (LA §4.6.2); Fenced when there is no head."""
    record = await authority.load_record()
    if record is None:
        raise Fenced("recovery fault inventory needs an existing leader authority head")
    return fault_inventory_of(record)


async def record_recovery_fault(
    authority: LeaderLeaseStore,
    publisher: RecoveryFaultPublisher,
    request_sequence: int,
    *,
    deadline: float,
) -> RecordRecoveryFaultResult:
    """Admit `publisher`'s fault request `request_sequence` (LA §4.6.1). No leader proof: any
    participant may report under the current term (LA §11.4). Raises Fenced when the namespace has
    no authority head, InvalidArgument for a non-canonical publisher, a zero request sequence or
    a second publisher of one process term."""
    with writing("recovery fault publisher"):
        validate_fault_publisher(publisher)
    if type(request_sequence) is not int or not 1 <= request_sequence <= U64_MAX:
        raise InvalidArgument(
            f"recovery fault request sequence must be nonzero, not {request_sequence!r}"
        )

    async def decide(
        head: LeaderAuthorityRecord, _: admission.RequireTerm
    ) -> admission.Decision[RecordRecoveryFaultResult]:
        settled = _settled_without_write(head, publisher, request_sequence)
        if settled is not None:
            return admission.Answer(settled)
        # A lost race re-derives from the winner, where our own request may already be (LA §11.1).
        return admission.Append(
            _fault_candidate(head, publisher, request_sequence), Active(), Active()
        )

    return await admission.admit(
        authority, proof=None, decide=decide, what="recovery fault", deadline=deadline
    )


def _settled_without_write(
    head: LeaderAuthorityRecord, publisher: RecoveryFaultPublisher, request_sequence: int
) -> RecordRecoveryFaultResult | None:
    """LA §4.6.1 step 2: the answer when the head's slot already decides it, None to append."""
    node = publisher.participant.node_id
    slot = fault_slot_of(head.recovery_fault_slots, node)
    if slot is None:
        return None
    if slot.publisher == publisher and slot.request_sequence == request_sequence:
        # A tombstone remembers the exact cleared request: never re-admitted.
        return Active() if slot.active else AlreadyCleared()
    term = publisher.process_term
    if term < slot.publisher.process_term:
        return Superseded()
    if term == slot.publisher.process_term:
        if publisher.participant.boot_incarnation != slot.publisher.participant.boot_incarnation:
            raise InvalidArgument(
                f"stable node {node} has two recovery fault publishers for process term {term}"
            )
        if request_sequence < slot.request_sequence:
            return CoveredByNewerRequest()
    return None  # the same process with a newer request, or a higher term: replace the slot


def _fault_candidate(
    head: LeaderAuthorityRecord, publisher: RecoveryFaultPublisher, request_sequence: int
) -> LeaderAuthorityRecord:
    """LA §4.6.1 step 3: seq+1 with the lease otherwise unchanged; the slot inserted or replaced
    with fault_sequence = revision = the new sequence."""
    # LA §3.3: a fault append keeps renewal_sequence, token, owner and expiry (liveness identity).
    record = admission.successor(head)
    seq = record.lease.seq
    # LA-16: the fault sequence is the admitting sequence, so it is never reused.
    slot = AuthorityRecoveryFaultSlot(
        publisher=publisher, request_sequence=request_sequence, fault_sequence=seq, active=True
    )
    node = publisher.participant.node_id
    slots = [s for s in head.recovery_fault_slots if s.publisher.participant.node_id != node]
    bisect.insort(slots, slot, key=lambda s: s.publisher.participant.node_id)
    return msgspec.structs.replace(
        record, recovery_fault_revision=seq, recovery_fault_slots=tuple(slots)
    )
