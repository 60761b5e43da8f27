"""Recovery release through the leader authority log (LA §3.8, LA §4.6.3 to LA §4.6.9;
invariants LA-5, LA-16; quirks LA §11.1, LA §11.13).

* `record_recovery_release_commit`: admit a staged terminal under the exact term that froze its
  round, only while the fault inventory still equals the round's frozen one (LA-16:
  `FaultsChanged` otherwise). The winner check (an existing release head with this terminal or
  a generation >= ours) comes BEFORE the proof check, so a deposed term's retry still learns
  that its release is durable (LA §11.13). The covered slots that the round stopped (same node and
  boot) become tombstones; every other slot is dropped.
* `authorize_recovery_release`: may this exact process treat its fault as cleared by this exact
  terminal (LA-16)?
* `recovery_admission_snapshot` / `recovery_admission_is_current` /
  `latest_recovery_release_terminal`: bounded re-checked reads (4 attempts).

Terminal encoding, release ids, round validation, staging and loading live in
`recovery_terminal` (re-exported here). The release commit is admitted by `admission.admit`:
bounded by AUTHORITY_MUTATION_ATTEMPTS_MAX (then Contended) and the caller's absolute monotonic
`deadline`.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from laminar_cluster.authority import admission
from laminar_cluster.authority.recovery_faults import (
    RecoveryFaultInventory,
    fault_inventory_of,
    fault_slot_of,
)
from laminar_cluster.authority.recovery_terminal import (
    admitted_terminal,
    encode_terminal,
    fault_sequence,
    load_recovery_release_terminal,
    release_id_for,
    stage_recovery_release_terminal,
    stopped_participant_incarnation,
    terminal_path,
    terminal_ref,
    validate_announcement,
    validate_round,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import Fenced, LaminarError, StoreUnavailable
from laminar_cluster.fencing import LeaderProof, proof_is_canonical
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_LEASE_HEAD_READ_ATTEMPTS
from laminar_cluster.lease.records import (
    AuthorityRecoveryReleaseCommit,
    LeaderAuthorityRecord,
    RecoveryAnnouncement,
    RecoveryFaultPublisher,
    RecoveryReleaseLink,
    RecoveryReleaseTerminalRef,
)
from laminar_cluster.lease.validate import lease_matches_proof, validate_fault_publisher

__all__ = [
    "FaultsChanged",
    "RecordRecoveryReleaseCommitResult",
    "RecoveryAdmissionSnapshot",
    "ReleaseConflict",
    "ReleaseCreated",
    "ReleaseUnchanged",
    "authorize_recovery_release",
    "encode_terminal",
    "latest_recovery_release_terminal",
    "load_recovery_release_terminal",
    "record_recovery_release_commit",
    "recovery_admission_is_current",
    "recovery_admission_snapshot",
    "release_id_for",
    "stage_recovery_release_terminal",
    "terminal_path",
    "terminal_ref",
    "validate_announcement",
    "validate_round",
]


@dataclass(frozen=True)
class ReleaseCreated:
    """The release commit of `ref` was appended by this call (or its identical retry)."""

    ref: RecoveryReleaseTerminalRef


@dataclass(frozen=True)
class ReleaseUnchanged:
    """The release of `ref` was already the durable release head."""

    ref: RecoveryReleaseTerminalRef


@dataclass(frozen=True)
class ReleaseConflict:
    """Another terminal of the same or a higher generation is the durable release head (LA-16)."""

    winner: RecoveryReleaseTerminalRef


@dataclass(frozen=True)
class FaultsChanged:
    """The fault inventory moved after the round was frozen: nothing was committed (LA-16)."""


RecordRecoveryReleaseCommitResult = (
    ReleaseCreated | ReleaseUnchanged | ReleaseConflict | FaultsChanged
)


@dataclass(frozen=True)
class RecoveryAdmissionSnapshot:
    """Evidence, not authority (LA §4.6.7): the committed release terminal (if any), the fault
    inventory and authority sequence it was re-checked at, and the release head."""

    committed_release: RecoveryAnnouncement | None
    fault_inventory: RecoveryFaultInventory
    authority_sequence: int
    release_head: RecoveryReleaseLink | None


async def record_recovery_release_commit(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    ref: RecoveryReleaseTerminalRef,
    *,
    deadline: float,
) -> RecordRecoveryReleaseCommitResult:
    """Admit the staged terminal `ref` under `proof` (LA §4.6.5). Raises Fenced when the proof is
    not the round's or not the current term's, or there is no authority head."""
    what = "recovery release commit"
    async with within_deadline(authority.clock, deadline, what):
        terminal = await load_recovery_release_terminal(authority, ref)  # validates the ref
    # LA-5: only the exact term that froze the round may commit its release.
    if terminal.round.leader_proof != proof or not proof_is_canonical(proof):
        raise Fenced(f"{what}: the proof is not the recovery round's leader proof")
    frozen = RecoveryFaultInventory(
        revision=terminal.round.fault_revision, faults=terminal.round.faults
    )

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> admission.Decision[RecordRecoveryReleaseCommitResult]:
        # LA §11.13: the winner check precedes the proof check.
        settled = await _settled_by_release_head(authority, head, ref)
        if settled is not None:
            return admission.Answer(settled)
        require_term()  # LA-5: admitted only right after a record of the proof's exact term
        if fault_inventory_of(head) != frozen:  # LA-16: only the exact fault set it froze
            return admission.Answer(FaultsChanged())
        created = ReleaseCreated(ref=ref)  # spec: Created also for an identical retry
        return admission.Append(_release_candidate(head, terminal, proof, ref), created, created)

    return await admission.admit(
        authority, proof=proof, decide=decide, what=what, deadline=deadline
    )


async def _settled_by_release_head(
    authority: LeaderLeaseStore, record: LeaderAuthorityRecord, ref: RecoveryReleaseTerminalRef
) -> ReleaseUnchanged | ReleaseConflict | None:
    """LA-16: releases are monotone by generation, one terminal per generation. A release head
    with this terminal, or with a generation >= ours, settles the call; its blob is revalidated
    first."""
    link = record.recovery_release_head
    if link is None:
        return None
    if link.terminal != ref and link.terminal.release.generation < ref.release.generation:
        return None
    await load_recovery_release_terminal(authority, link.terminal)
    if link.terminal == ref:
        return ReleaseUnchanged(ref=ref)
    return ReleaseConflict(winner=link.terminal)


def _release_candidate(
    head: LeaderAuthorityRecord,
    terminal: RecoveryAnnouncement,
    proof: LeaderProof,
    ref: RecoveryReleaseTerminalRef,
) -> LeaderAuthorityRecord:
    """LA §4.6.5 step 5: seq+1, lease otherwise unchanged; the covered slots of stopped processes
    (same node and boot) become tombstones, every other slot is dropped."""
    record = admission.successor(head)  # LA §3.3: liveness identity unchanged
    seq = record.lease.seq
    round_ = terminal.round
    tombstones = tuple(
        msgspec.structs.replace(slot, active=False)
        for slot in head.recovery_fault_slots
        if slot.active
        and stopped_participant_incarnation(round_, slot.publisher.participant.node_id)
        == slot.publisher.participant.boot_incarnation
    )
    return msgspec.structs.replace(
        record,
        recovery_fault_revision=seq,  # LA-16: the release changed the slot set at seq
        recovery_fault_slots=tombstones,
        recovery_release_commit=AuthorityRecoveryReleaseCommit(terminal=ref, leader_proof=proof),
        recovery_release_head=RecoveryReleaseLink(sequence=seq, terminal=ref),
    )


async def authorize_recovery_release(
    authority: LeaderLeaseStore, clearer: RecoveryFaultPublisher, terminal: RecoveryAnnouncement
) -> bool:
    """Read-only (LA §4.6.6, LA-16): true iff `terminal` is the current release head, the inventory
    is settled by it with no active fault, and `clearer`'s exact fault (publisher and
    fault_sequence) is a tombstone of it; a node the round covers no fault of may resume iff it
    has no active slot."""
    with writing("recovery release clearer"):
        validate_fault_publisher(clearer)
    ref = terminal_ref(terminal)
    record = await authority.load_record()
    if record is None:
        raise Fenced("recovery release authorization needs an existing leader authority head")
    link = record.recovery_release_head
    if link is None or link.terminal != ref or record.recovery_fault_revision != link.sequence:
        return False
    if any(slot.active for slot in record.recovery_fault_slots):
        return False
    node = clearer.participant.node_id
    slot = fault_slot_of(record.recovery_fault_slots, node)
    expected = fault_sequence(terminal.round, node)
    if expected is None:
        return slot is None or not slot.active
    return (
        slot is not None
        and slot.publisher == clearer
        and slot.fault_sequence == expected
        and not slot.active
    )


async def recovery_admission_snapshot(authority: LeaderLeaseStore) -> RecoveryAdmissionSnapshot:
    """The committed release and the fault inventory, re-checked against a second head read
    (LA §4.6.7; up to 4 attempts, then StoreUnavailable). Fenced without a head."""
    what = "recovery admission snapshot"
    for attempt in range(MAX_LEASE_HEAD_READ_ATTEMPTS):
        if attempt:
            await authority.clock.sleep(0)
        head = await _require_record(authority, what)
        link = head.recovery_release_head
        if link is None:
            return RecoveryAdmissionSnapshot(
                committed_release=None,
                fault_inventory=fault_inventory_of(head),
                authority_sequence=head.lease.seq,
                release_head=None,
            )
        fetched = await _fetch(authority, head, link)
        rechecked = await _require_record(authority, what)
        if (
            rechecked.lease.seq >= head.lease.seq
            and rechecked.recovery_release_head == link
            and rechecked.recovery_fault_revision == head.recovery_fault_revision
            and rechecked.recovery_fault_slots == head.recovery_fault_slots
        ):
            if isinstance(fetched, LaminarError):
                raise fetched  # a terminal-fetch error only counts against a stable head
            return RecoveryAdmissionSnapshot(
                committed_release=fetched,
                fault_inventory=fault_inventory_of(rechecked),
                authority_sequence=rechecked.lease.seq,
                release_head=rechecked.recovery_release_head,
            )
    raise StoreUnavailable(
        f"recovery admission changed during {MAX_LEASE_HEAD_READ_ATTEMPTS} read attempts"
    )


async def recovery_admission_is_current(
    authority: LeaderLeaseStore, snapshot: RecoveryAdmissionSnapshot, proof: LeaderProof
) -> bool:
    """True iff `proof` is the current term, the head is not older than the snapshot, the
    release head and inventory are unchanged, and no fault is active (LA §4.6.8). Called right
    before reopening intake: a takeover makes it false for the old proof."""
    record = await _require_record(authority, "recovery admission check")
    inventory = fault_inventory_of(record)
    return (
        lease_matches_proof(record.lease, proof)
        and record.lease.seq >= snapshot.authority_sequence
        and record.recovery_release_head == snapshot.release_head
        and inventory == snapshot.fault_inventory
        and not inventory.faults
    )


async def latest_recovery_release_terminal(
    authority: LeaderLeaseStore,
) -> RecoveryAnnouncement | None:
    """The terminal of the current release head, or None (LA §4.6.9; up to 4 attempts)."""
    for attempt in range(MAX_LEASE_HEAD_READ_ATTEMPTS):
        if attempt:
            await authority.clock.sleep(0)
        head = await authority.load_record()
        if head is None or head.recovery_release_head is None:
            return None
        link = head.recovery_release_head
        fetched = await _fetch(authority, head, link)
        rechecked = await _require_record(authority, "latest recovery release terminal")
        if rechecked.recovery_release_head == link:
            if isinstance(fetched, LaminarError):
                raise fetched
            return fetched
    raise StoreUnavailable(
        f"recovery release head changed during {MAX_LEASE_HEAD_READ_ATTEMPTS} read attempts"
    )


async def _fetch(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord, link: RecoveryReleaseLink
) -> RecoveryAnnouncement | LaminarError:
    """The terminal, or the error fetching it (surfaced only once the head is re-checked)."""
    try:
        return await admitted_terminal(authority, head, link)
    except LaminarError as error:
        return error


async def _require_record(authority: LeaderLeaseStore, what: str) -> LeaderAuthorityRecord:
    record = await authority.load_record()
    if record is None:
        raise Fenced(f"{what}: no leader authority head")
    return record
