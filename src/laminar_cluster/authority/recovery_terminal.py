"""Recovery rounds, release ids and content-addressed release terminals (LA §2.1,
LA §2.6, LA §3.8, LA §4.6.3, LA §4.6.4, LA §8.7; invariants LA-16, LA-11).

A **terminal** is a `RecoveryAnnouncement` in phase `release_committed{epoch}`, stored once at
`control/recovery-release-terminals/v2/generation={gen:020}/sha256={hex}.json` (Create; an
existing object is fine, but it is read back and must equal the proposal). Its ref is
`{release id of the same round in phase release{epoch}, sha256 of the canonical bytes,
encoded_len}`. Every read revalidates the blob against its ref (LA-11: the blob is not trusted
merely because a ref exists).

**Release ids** (`release_id_for`, the spec's `RecoveryReleaseId::for_pending`, whose owning
controller module is not in the seeds; this port's definition):

    protocol_version = RECOVERY_RELEASE_PROTOCOL_VERSION (1)
    generation, nonce, driver = round.id
    epoch = the release phase's epoch
    round_sha256 = sha256(RELEASE_ROUND_DIGEST_LABEL + codec.encode(pending)) as 64 lowercase hex
    where pending = RecoveryAnnouncement(version=1, round=round, phase=release{epoch})

`codec.encode(pending)` is the canonical control-record JSON (declaration key order, compact) of
the pending announcement, the exact input of `for_pending`; it covers the whole frozen round
(a bare `RecoveryRound` has no version field, so it is not a record the codec encodes alone).
The label (with its trailing NUL) separates this digest from every other SHA-256 the system
computes over canonical JSON, so a round digest can never be confused with a record or blob
address. Changing the announcement's record layout or the label means a new protocol version.

**Round validity** (LA §8.7, `RecoveryRound::validate`): generation, driver nonzero and a canonical
nonce; a canonical leader proof whose node is the driver, and the driver an owner of the
canonical assignment fence with the proof's boot; fault_revision >= 1; faults non-empty,
strictly sorted by reporter, each sequence in 1..=fault_revision; evidence participants strictly
sorted, canonical, not fence owners, each a fault reporter; the largest terminal encoding (phase
release_committed with the largest epoch) at most 256 KiB.

Errors: a bad terminal or ref from the caller is an InvalidArgument before any I/O; a missing,
torn, foreign or non-canonical blob is a CorruptRecord naming it (the spec's `Invalid`); store
failures are StoreUnavailable (`Io`).
"""

from __future__ import annotations

import itertools
from typing import Final

from laminar_cluster.authority.blobs import create_and_read_back
from laminar_cluster.checkpoint.reader import read_content_addressed
from laminar_cluster.codec import decode, encode, encode_checked, sha256_hex
from laminar_cluster.codec.shape import ShapeViolation, reading, writing
from laminar_cluster.codec.types import U64_MAX
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
)
from laminar_cluster.fencing import fence_is_canonical, proof_is_canonical
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_RECOVERY_RELEASE_TERMINAL_BYTES
from laminar_cluster.lease.log import read_record_from
from laminar_cluster.lease.paths import record_path, release_terminal_path
from laminar_cluster.lease.records import (
    LeaderAuthorityRecord,
    PhaseRelease,
    PhaseReleaseCommitted,
    RecoveryAnnouncement,
    RecoveryReleaseId,
    RecoveryReleaseLink,
    RecoveryReleaseTerminalRef,
    RecoveryRound,
)
from laminar_cluster.lease.validate import validate_release_ref
from laminar_cluster.lease.validate_decisions import uuid_is_canonical

RECOVERY_RELEASE_PROTOCOL_VERSION: Final = 1
RELEASE_ROUND_DIGEST_LABEL: Final = b"laminar-cluster/recovery-release-round/v1\x00"
RECOVERY_ANNOUNCEMENT_VERSION: Final = 1

_ROUND = "recovery round is not canonical"
_TERMINAL = "recovery release terminal"


def fault_sequence(round_: RecoveryRound, node_id: int) -> int | None:
    """The round's frozen fault sequence of reporter `node_id`, or None if it covers none."""
    for fault in round_.faults:
        if fault.reporter == node_id:
            return fault.sequence
    return None


def stopped_participant_incarnation(round_: RecoveryRound, node_id: int) -> str | None:
    """The boot of `node_id` in the round's stopped roster: an assignment owner's boot, else an
    evidence participant's, else None."""
    boot = round_.assignment_fence.participant_incarnation(node_id)
    if boot is not None:
        return boot
    for participant in round_.evidence_participants:
        if participant.node_id == node_id:
            return participant.boot_incarnation
    return None


def validate_round(round_: RecoveryRound) -> None:
    """LA §8.7 `RecoveryRound::validate` without the size bound (see `validate_announcement`)."""
    round_id, proof, fence = round_.id, round_.leader_proof, round_.assignment_fence
    if round_id.generation == 0 or round_id.driver == 0:
        raise ShapeViolation(
            f"{_ROUND}: generation {round_id.generation} and driver {round_id.driver} must be "
            "nonzero"
        )
    if not uuid_is_canonical(round_id.nonce):
        raise ShapeViolation(f"{_ROUND}: nonce {round_id.nonce!r} is not a canonical UUID")
    if not proof_is_canonical(proof):
        raise ShapeViolation(f"{_ROUND}: leader proof is not canonical")
    if proof.owner.node_id != round_id.driver:
        raise ShapeViolation(
            f"{_ROUND}: leader node {proof.owner.node_id} is not the driver {round_id.driver}"
        )
    if not fence_is_canonical(fence):
        raise ShapeViolation(f"{_ROUND}: assignment fence is not canonical")
    if fence.participant_incarnation(round_id.driver) != proof.owner.boot_id:
        raise ShapeViolation(
            f"{_ROUND}: driver {round_id.driver} boot {proof.owner.boot_id} is not an owner of "
            f"assignment version {fence.assignment_version}"
        )
    _check_faults(round_)
    _check_evidence(round_)


def _check_faults(round_: RecoveryRound) -> None:
    revision, faults = round_.fault_revision, round_.faults
    if revision == 0:
        raise ShapeViolation(f"{_ROUND}: fault_revision is 0")
    if not faults:
        raise ShapeViolation(f"{_ROUND}: it covers no fault")
    for earlier, later in itertools.pairwise(faults):
        if earlier.reporter >= later.reporter:
            raise ShapeViolation(
                f"{_ROUND}: faults are not strictly sorted by reporter ({earlier.reporter} "
                f"before {later.reporter})"
            )
    for fault in faults:
        if fault.reporter == 0 or not 1 <= fault.sequence <= revision:
            raise ShapeViolation(
                f"{_ROUND}: fault of reporter {fault.reporter} has sequence {fault.sequence} "
                f"outside 1..={revision}"
            )


def _check_evidence(round_: RecoveryRound) -> None:
    evidence, fence = round_.evidence_participants, round_.assignment_fence
    for earlier, later in itertools.pairwise(evidence):
        if earlier.node_id >= later.node_id:
            raise ShapeViolation(
                f"{_ROUND}: evidence participants are not strictly sorted ({earlier.node_id} "
                f"before {later.node_id})"
            )
    reporters = {fault.reporter for fault in round_.faults}
    for participant in evidence:
        node = participant.node_id
        if node == 0 or not uuid_is_canonical(participant.boot_incarnation):
            raise ShapeViolation(f"{_ROUND}: evidence participant {node} is not canonical")
        if fence.participant_incarnation(node) is not None:
            raise ShapeViolation(f"{_ROUND}: evidence participant {node} is an assignment owner")
        if node not in reporters:
            raise ShapeViolation(f"{_ROUND}: evidence participant {node} reported no fault")


def validate_announcement(announcement: RecoveryAnnouncement) -> None:
    """The round is valid and its largest terminal encoding fits in 256 KiB (LA §8.7)."""
    validate_round(announcement.round)
    largest = RecoveryAnnouncement(
        version=RECOVERY_ANNOUNCEMENT_VERSION,
        round=announcement.round,
        phase=PhaseReleaseCommitted(epoch=U64_MAX),
    )
    size = len(encode(largest))
    if size > MAX_RECOVERY_RELEASE_TERMINAL_BYTES:
        raise ShapeViolation(
            f"{_ROUND}: its largest terminal encoding is {size} bytes; maximum is "
            f"{MAX_RECOVERY_RELEASE_TERMINAL_BYTES}"
        )


def _release_id(round_: RecoveryRound, epoch: int) -> RecoveryReleaseId:
    """The release id of `round_` released at `epoch` (see the module docstring)."""
    pending = RecoveryAnnouncement(
        version=RECOVERY_ANNOUNCEMENT_VERSION, round=round_, phase=PhaseRelease(epoch=epoch)
    )
    digest = sha256_hex(RELEASE_ROUND_DIGEST_LABEL + encode(pending))
    return RecoveryReleaseId(
        protocol_version=RECOVERY_RELEASE_PROTOCOL_VERSION,
        generation=round_.id.generation,
        nonce=round_.id.nonce,
        driver=round_.id.driver,
        epoch=epoch,
        round_sha256=digest,
    )


def release_id_for(announcement: RecoveryAnnouncement) -> RecoveryReleaseId:
    """`RecoveryReleaseId::for_pending`: the id of a valid announcement in phase release."""
    phase = announcement.phase
    if not isinstance(phase, PhaseRelease):
        raise InvalidArgument("a recovery release id is derived from an announcement in Release")
    with writing("recovery release announcement"):
        validate_announcement(announcement)
    return _release_id(announcement.round, phase.epoch)


def _terminal_release_id(terminal: RecoveryAnnouncement) -> RecoveryReleaseId:
    """The release id a terminal's ref must carry: the same round in phase release{epoch}."""
    validate_announcement(terminal)
    phase = terminal.phase
    if not isinstance(phase, PhaseReleaseCommitted):
        raise ShapeViolation(f"{_TERMINAL} must carry ReleaseCommitted")
    return _release_id(terminal.round, phase.epoch)


def encode_terminal(terminal: RecoveryAnnouncement) -> tuple[bytes, RecoveryReleaseTerminalRef]:
    """The canonical terminal bytes and their ref; InvalidArgument before any I/O if the
    terminal is invalid, not release_committed, or larger than 256 KiB."""
    with writing(_TERMINAL):
        release = _terminal_release_id(terminal)
    data = encode_checked(terminal, what=_TERMINAL, max_bytes=MAX_RECOVERY_RELEASE_TERMINAL_BYTES)
    ref = RecoveryReleaseTerminalRef(
        release=release, sha256=sha256_hex(data), encoded_len=len(data)
    )
    with writing(_TERMINAL):
        validate_release_ref(ref)
    return data, ref


def terminal_ref(terminal: RecoveryAnnouncement) -> RecoveryReleaseTerminalRef:
    return encode_terminal(terminal)[1]


def terminal_path(ref: RecoveryReleaseTerminalRef) -> str:
    return release_terminal_path(ref.release.generation, ref.sha256)


async def stage_recovery_release_terminal(
    authority: LeaderLeaseStore, terminal: RecoveryAnnouncement
) -> RecoveryReleaseTerminalRef:
    """Store `terminal` at its content address and return its ref (LA §4.6.3). An existing object
    is fine if it reads back as exactly this terminal; different content is a CorruptRecord."""
    data, ref = encode_terminal(terminal)
    await create_and_read_back(
        authority.store,
        terminal_path(ref),
        data,
        lambda: load_recovery_release_terminal(authority, ref),
        terminal,
        what=f"{_TERMINAL} {ref.sha256}",
    )
    return ref


async def load_recovery_release_terminal(
    authority: LeaderLeaseStore, ref: RecoveryReleaseTerminalRef
) -> RecoveryAnnouncement:
    """The terminal `ref` names, revalidated on every read (LA §4.6.4, LA-16, LA-11): metadata
    size and body length equal encoded_len, strict canonical decode, a valid release_committed
    terminal, and the recomputed ref equal to `ref`."""
    with writing(f"{_TERMINAL} reference"):
        validate_release_ref(ref)
    key = terminal_path(ref)
    body = await read_content_addressed(
        authority.store, key, what=f"{_TERMINAL} {ref.sha256}", expected_len=ref.encoded_len
    )
    # LA-11: strict parse and canonical bytes (codec), then every terminal rule.
    terminal = decode(body, RecoveryAnnouncement, key=key, max_bytes=ref.encoded_len)
    with reading(key):
        release = _terminal_release_id(terminal)
    actual = RecoveryReleaseTerminalRef(
        release=release, sha256=sha256_hex(body), encoded_len=len(body)
    )
    if actual != ref:
        raise CorruptRecord(
            f"{key}: {_TERMINAL} {ref.sha256} does not match its content-addressed reference",
            key=key,
        )
    return terminal


async def admitted_terminal(
    authority: LeaderLeaseStore, head: LeaderAuthorityRecord, link: RecoveryReleaseLink
) -> RecoveryAnnouncement:
    """The terminal of release head `link`, fetched through the record that admitted it (LA §4.6.7
    step 2, LA §4.8.2 step 2): that record must carry the same terminal in its commit and a
    release head equal to `link`, and the blob's round must carry the commit's leader proof;
    CorruptRecord otherwise (LA-11)."""
    key = record_path(link.sequence)
    admitting = await read_record_from(authority.store, head, link.sequence)
    if admitting is None:
        raise CorruptRecord(
            f"{key}: recovery release admission is missing from retained authority history",
            key=key,
        )
    commit = admitting.recovery_release_commit
    if (
        commit is None
        or commit.terminal != link.terminal
        or admitting.recovery_release_head != link
    ):
        raise CorruptRecord(
            f"{key}: recovery release head does not match its admitting authority record", key=key
        )
    terminal = await load_recovery_release_terminal(authority, link.terminal)
    if terminal.round.leader_proof != commit.leader_proof:
        blob = terminal_path(link.terminal)
        raise CorruptRecord(
            f"{blob}: recovery release terminal does not match its admitting leader proof",
            key=blob,
        )
    return terminal
