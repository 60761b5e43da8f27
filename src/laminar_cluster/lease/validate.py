"""Validation, encoding and decoding of the leader authority's durable records.

Spec sections: LA §2.3 (head pointer rules), LA §2.5 (canonical encoding, through `codec`), LA §3.1
to LA §3.2 (owner and lease validity), LA §3.12 (record validation: steps 1-11 in the spec's order),
LA §4.1.1 steps 2-5 and LA §4.1.6 step 1 (size limits, the path-sequence check, the fault-inventory
headroom), LA §8.8 (catalog manifest). Split by size: `validate_decisions.py` holds LA §3.6
(decisions, process fences) and steps 3-5 (links and floors), `validate_chains.py` steps 6-11; this
module runs them and re-exports their public names.

Every rule raises `checkpoint.validate.ShapeViolation` with the Rust seed's phrase for the rule
followed by the one fact that failed. `encode_*` run the rules under `writing()` (a violation is
an InvalidArgument before any I/O); `decode_*` under `reading(key)` (a CorruptRecord naming the
object: LA-11, corrupt or hand-edited state is never acted upon).
"""

from __future__ import annotations

import unicodedata

from laminar_cluster.codec import decode, encode_checked
from laminar_cluster.codec.memo import pure_memo
from laminar_cluster.codec.shape import ShapeViolation, reading, writing
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.limits import (
    AUTHORITY_HEAD_VERSION,
    AUTHORITY_RECORD_VERSION,
    MAX_AUTHORITY_HEAD_BYTES,
    MAX_AUTHORITY_RECORD_BYTES,
    MAX_CATALOG_ENTRIES,
    MAX_CATALOG_MANIFEST_BYTES,
    RECOVERY_FAULT_AUTHORITY_HEADROOM_BYTES,
)
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.lease.records import (
    AuthorityHeadPointer,
    CatalogManifest,
    CatalogManifestRef,
    LeaderAuthorityRecord,
    LeaderLease,
    LeaderLeaseOwner,
)
from laminar_cluster.lease.validate_chains import (
    check_assignment_chain,
    check_assignment_floor_vs_head,
    check_fault_inventory,
    check_outcome_chain,
    check_outcome_floor_vs_heads,
    check_recovery_release,
    lease_matches_proof,
    validate_fault_publisher,
    validate_release_id,
    validate_release_ref,
)
from laminar_cluster.lease.validate_decisions import (
    check_content_address,
    drain_transition_is_canonical,
    process_fence_is_canonical,
    uuid_is_canonical,
    validate_assignment_decision,
    validate_assignment_floor,
    validate_drain_decision,
    validate_outcome_floor,
    validate_outcome_link,
    validate_recovery_decision,
    validate_snapshot_ref,
)

__all__ = [
    "ACTIVE_FAULT_RECORD_LIMIT_BYTES",
    "ShapeViolation",
    "decode_pointer",
    "decode_record",
    "drain_transition_is_canonical",
    "encode_pointer",
    "encode_record",
    "lease_matches_proof",
    "process_fence_is_canonical",
    "validate_assignment_decision",
    "validate_assignment_floor",
    "validate_catalog_manifest",
    "validate_catalog_ref",
    "validate_drain_decision",
    "validate_fault_publisher",
    "validate_lease",
    "validate_outcome_floor",
    "validate_owner",
    "validate_pointer",
    "validate_record",
    "validate_recovery_decision",
    "validate_release_id",
    "validate_release_ref",
    "validate_snapshot_ref",
]

ACTIVE_FAULT_RECORD_LIMIT_BYTES = (
    MAX_AUTHORITY_RECORD_BYTES - RECOVERY_FAULT_AUTHORITY_HEADROOM_BYTES
)

_OWNER = "leader owner node, boot identity, and process term must be nonzero"
_LEASE = (
    "leader lease sequence and token must be nonzero and renewal sequence must be within "
    "1..=sequence"
)
_HEAD = "leader authority head has an unsupported version, zero sequence, or nil nonce"


def validate_owner(owner: LeaderLeaseOwner) -> None:
    """LA §3.1: an exact process incarnation; node, boot and process term all nonzero/non-nil."""
    if owner.node == 0:
        raise ShapeViolation(f"{_OWNER}: node is 0")
    if not uuid_is_canonical(owner.boot):
        raise ShapeViolation(f"{_OWNER}: boot {owner.boot!r} is not a canonical non-nil UUID")
    if owner.process_term == 0:
        raise ShapeViolation(f"{_OWNER}: process term is 0")


def validate_lease(lease: LeaderLease) -> None:
    """LA §3.2: owner valid; seq, token nonzero; renewal_sequence in 1..=seq; catalog ref valid."""
    validate_owner(lease.owner)
    if lease.seq == 0:
        raise ShapeViolation(f"{_LEASE}: seq is 0")
    if not 1 <= lease.renewal_sequence <= lease.seq:
        raise ShapeViolation(
            f"{_LEASE}: renewal_sequence {lease.renewal_sequence} is outside 1..={lease.seq}"
        )
    if lease.token == 0:
        raise ShapeViolation(f"{_LEASE}: token is 0")
    if lease.catalog_manifest is not None:
        try:
            validate_catalog_ref(lease.catalog_manifest)
        except ShapeViolation as violation:
            raise ShapeViolation(f"leader lease catalog manifest is invalid: {violation}") from None


def validate_catalog_ref(ref: CatalogManifestRef) -> None:
    """LA §3.2: version 1, 64 lowercase hex, encoded_len 1..=8 MiB, entry_count <= 4096."""
    if ref.version != 1:
        raise ShapeViolation(f"catalog manifest reference version {ref.version} is not 1")
    check_content_address(
        "catalog manifest reference", ref.sha256, ref.encoded_len, MAX_CATALOG_MANIFEST_BYTES
    )
    if ref.entry_count > MAX_CATALOG_ENTRIES:
        raise ShapeViolation(
            f"catalog manifest reference entry_count {ref.entry_count} exceeds "
            f"{MAX_CATALOG_ENTRIES}"
        )


def _is_white_space(character: str) -> bool:
    """Unicode White_Space (what Rust's `trim` removes)."""
    return character.isspace() or unicodedata.category(character) == "Zs"


def validate_catalog_manifest(manifest: CatalogManifest) -> None:
    """LA §8.8: at most 4096 entries; names non-empty, trimmed and unique; DDL not blank. (The
    8 MiB size bound is checked where the manifest is encoded.)"""
    if manifest.version != 1:
        raise ShapeViolation(f"catalog manifest version {manifest.version} is not 1")
    if len(manifest.entries) > MAX_CATALOG_ENTRIES:
        raise ShapeViolation(
            f"catalog manifest has {len(manifest.entries)} entries; maximum is "
            f"{MAX_CATALOG_ENTRIES}"
        )
    seen: set[str] = set()
    for entry in manifest.entries:
        name = entry.canonical_name
        if not name or _is_white_space(name[0]) or _is_white_space(name[-1]):
            raise ShapeViolation(
                f"catalog manifest entry name {name[:80]!r} must be non-empty and trimmed"
            )
        if name in seen:
            raise ShapeViolation(f"catalog manifest entry name {name[:80]!r} is not unique")
        seen.add(name)
        if all(_is_white_space(character) for character in entry.ddl):
            raise ShapeViolation(f"catalog manifest entry {name[:80]!r} has a blank DDL")


def validate_pointer(pointer: AuthorityHeadPointer) -> None:
    """LA §2.3 / LA §4.1.2 step 5: version 1, sequence != 0, a canonical non-nil nonce."""
    if pointer.version != AUTHORITY_HEAD_VERSION:
        raise ShapeViolation(f"{_HEAD}: version {pointer.version}")
    if pointer.sequence == 0:
        raise ShapeViolation(f"{_HEAD}: sequence is 0")
    if not uuid_is_canonical(pointer.nonce):
        raise ShapeViolation(f"{_HEAD}: nonce {pointer.nonce!r} is not a canonical non-nil UUID")


def validate_record(record: LeaderAuthorityRecord) -> None:
    """LA §3.12: every rule of a v9 authority record, steps 1-11 in the spec's order."""
    if record.version != AUTHORITY_RECORD_VERSION:  # step 1
        raise ShapeViolation(f"authority record version {record.version} is unsupported")
    validate_lease(record.lease)  # step 2
    for link, field in (  # step 3
        (record.previous_outcome, "previous_outcome"),
        (record.outcome_head, "outcome_head"),
        (record.previous_commit, "previous_commit"),
        (record.commit_head, "commit_head"),
    ):
        if link is not None:
            validate_outcome_link(link, field)
    if record.outcome_floor is not None:  # step 4
        validate_outcome_floor(record.outcome_floor)
    if record.assignment_decision_floor is not None:  # step 5
        validate_assignment_floor(record.assignment_decision_floor)
    check_fault_inventory(record)  # step 6
    check_outcome_chain(record)  # step 7
    check_outcome_floor_vs_heads(record)  # step 8
    check_assignment_chain(record)  # step 9
    check_assignment_floor_vs_head(record)  # step 10
    check_recovery_release(record)  # step 11


def encode_record(record: LeaderAuthorityRecord) -> bytes:
    """The canonical bytes of `record` for a create (LA §4.1.6 step 1): validated, 1..=256 KiB,
    and <= 224 KiB while any fault slot is active (the mandatory headroom, so the appends that
    settle the faults still fit). Raises InvalidArgument before any I/O."""
    what = record_path(record.lease.seq) if record.lease.seq > 0 else "leader authority record"
    with writing(what):
        validate_record(record)
    data = encode_checked(record, what=what, max_bytes=MAX_AUTHORITY_RECORD_BYTES)
    if any(slot.active for slot in record.recovery_fault_slots) and (
        len(data) > ACTIVE_FAULT_RECORD_LIMIT_BYTES
    ):
        raise InvalidArgument(
            f"{what}: recovery fault inventory leaves {RECOVERY_FAULT_AUTHORITY_HEADROOM_BYTES} "
            f"bytes of mandatory authority headroom only up to {ACTIVE_FAULT_RECORD_LIMIT_BYTES} "
            f"bytes; candidate is {len(data)} bytes"
        )
    return data


@pure_memo(512)  # every poll re-reads the same records: each distinct body is checked once
def decode_record(body: bytes, key: str, path_seq: int) -> LeaderAuthorityRecord:
    """The record stored at `key` (sequence `path_seq`), LA §4.1.1 steps 2-5: size bound before
    parsing, strict parse, LA §3.12, body seq == path seq (LA-1), canonical bytes. CorruptRecord
    naming `key` on any failure."""
    # LA-11: size bound before parsing, strict parse, canonical bytes (codec), then every rule.
    record = decode(body, LeaderAuthorityRecord, key=key, max_bytes=MAX_AUTHORITY_RECORD_BYTES)
    with reading(key):
        validate_record(record)
    # LA-1: a record is the one at its path's sequence.
    if record.lease.seq != path_seq:
        raise CorruptRecord(
            f"{key}: lease.seq must equal the path seq: the body has {record.lease.seq}, the "
            f"path {path_seq}",
            key=key,
        )
    return record


def encode_pointer(pointer: AuthorityHeadPointer) -> bytes:
    """The canonical head-pointer bytes (LA §2.3), validated, at most 128 bytes."""
    with writing(HEAD_PATH):
        validate_pointer(pointer)
    return encode_checked(pointer, what=HEAD_PATH, max_bytes=MAX_AUTHORITY_HEAD_BYTES)


def decode_pointer(body: bytes, key: str = HEAD_PATH) -> AuthorityHeadPointer:
    """The head pointer stored at `key` (LA §4.1.2 steps 2, 4-6): 1..=128 bytes, strict parse
    (unknown fields refused), LA §2.3 rules, canonical bytes. CorruptRecord on any failure."""
    pointer = decode(body, AuthorityHeadPointer, key=key, max_bytes=MAX_AUTHORITY_HEAD_BYTES)
    with reading(key):
        validate_pointer(pointer)
    return pointer
