"""The one-time catalog seal through the leader authority log (LA §3.9, LA §4.7,
LA §8.8; invariants LA-5, LA-17, LA-11).

The catalog manifest (the cluster's DDL inventory) is stored once, content-addressed, at
`control/catalog-manifest/v1/{sha256}.json`, and its `CatalogManifestRef` is sealed into the
lease (`LeaderLease.catalog_manifest`) by one append under the exact current term. Every later
record carries the ref, renewals and takeovers included, so the seal survives them (LA-17).

* The already-sealed check comes before the proof check and before every write: a sealed
  namespace answers `SealExistingIdentical` for the same manifest (also to a deposed term) and
  raises Refused (the spec's `CatalogManifestError::Conflict`) for a different one (LA-17).
* The blob is verified against its ref (size, length, strict canonical decode, sha, entry
  count) on every read (LA-11).

Errors: a non-canonical proof, no head, or a proof that is not the current term is Fenced; an
invalid manifest InvalidArgument; a missing, foreign or corrupt blob CorruptRecord naming it
(the spec's `Invalid`/`Json`); store failures StoreUnavailable. The seal is admitted by
`admission.admit`: bounded by AUTHORITY_MUTATION_ATTEMPTS_MAX (then Contended) and the caller's
absolute monotonic `deadline`.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from laminar_cluster.authority import admission
from laminar_cluster.authority.blobs import create_and_read_back
from laminar_cluster.checkpoint.reader import read_content_addressed
from laminar_cluster.codec import decode, encode_checked, sha256_hex
from laminar_cluster.codec.shape import reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    Refused,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_CATALOG_MANIFEST_BYTES
from laminar_cluster.lease.paths import catalog_manifest_path
from laminar_cluster.lease.records import (
    CatalogManifest,
    CatalogManifestRef,
    LeaderAuthorityRecord,
)
from laminar_cluster.lease.validate import validate_catalog_manifest, validate_catalog_ref

_MANIFEST = "catalog manifest"


@dataclass(frozen=True)
class SealCreated:
    """This call appended the seal."""


@dataclass(frozen=True)
class SealExistingIdentical:
    """The identical manifest was already sealed (or our ambiguous append landed)."""


CatalogSealOutcome = SealCreated | SealExistingIdentical
SealDecision = admission.Decision[SealCreated | SealExistingIdentical]


def _reference(manifest: CatalogManifest, data: bytes) -> CatalogManifestRef:
    return CatalogManifestRef(
        version=1,
        sha256=sha256_hex(data),
        encoded_len=len(data),
        entry_count=len(manifest.entries),
    )


def encode_and_reference(manifest: CatalogManifest) -> tuple[bytes, CatalogManifestRef]:
    """The canonical manifest bytes (at most 8 MiB) and their ref (LA §8.8); InvalidArgument for
    an invalid manifest, before any I/O."""
    with writing(_MANIFEST):
        validate_catalog_manifest(manifest)
    data = encode_checked(manifest, what=_MANIFEST, max_bytes=MAX_CATALOG_MANIFEST_BYTES)
    ref = _reference(manifest, data)
    with writing(_MANIFEST):
        validate_catalog_ref(ref)
    return data, ref


async def _read_blob(
    authority: LeaderLeaseStore, ref: CatalogManifestRef
) -> tuple[CatalogManifest, bytes]:
    """The manifest `ref` names and its bytes, verified against `ref` (LA-17, LA-11)."""
    with writing(f"{_MANIFEST} reference"):
        validate_catalog_ref(ref)
    key = catalog_manifest_path(ref.sha256)
    body = await read_content_addressed(
        authority.store, key, what=f"{_MANIFEST} blob {ref.sha256}", expected_len=ref.encoded_len
    )
    manifest = decode(body, CatalogManifest, key=key, max_bytes=ref.encoded_len)
    with reading(key):
        validate_catalog_manifest(manifest)
    if _reference(manifest, body) != ref:
        raise CorruptRecord(
            f"{key}: {_MANIFEST} blob {ref.sha256} does not match its sealed reference", key=key
        )
    return manifest, body


async def load_catalog_manifest(
    authority: LeaderLeaseStore, ref: CatalogManifestRef
) -> CatalogManifest:
    """The manifest `ref` names, fully verified on every read (LA §4.7)."""
    manifest, _ = await _read_blob(authority, ref)
    return manifest


async def load_sealed_catalog_manifest(authority: LeaderLeaseStore) -> CatalogManifest | None:
    """The sealed manifest of the published head, or None if no head or no seal (the spec's
    `CatalogManifestStore::load`, LA §8.8)."""
    record = await authority.load_record()
    if record is None or record.lease.catalog_manifest is None:
        return None
    return await load_catalog_manifest(authority, record.lease.catalog_manifest)


async def seal_catalog(
    authority: LeaderLeaseStore,
    proof: LeaderProof,
    manifest: CatalogManifest,
    *,
    deadline: float,
) -> CatalogSealOutcome:
    """Seal `manifest` once for this namespace under the exact term `proof` (LA §4.7)."""
    what = "catalog seal"
    admission.require_canonical_proof(proof, what)
    data, ref = encode_and_reference(manifest)
    blob_ensured = False

    async def decide(
        head: LeaderAuthorityRecord, require_term: admission.RequireTerm
    ) -> SealDecision:
        nonlocal blob_ensured
        sealed = head.lease.catalog_manifest
        if sealed is not None:  # LA-17: before the proof check
            return admission.Answer(await _already_sealed(authority, sealed, manifest))
        require_term()  # LA-5: a seal is admitted only right after a record of the proof's term
        if not blob_ensured:
            await _ensure_blob(authority, data, ref)
            blob_ensured = True
        # LA §3.3: a seal keeps renewal_sequence, token, owner and expiry; only seq moves.
        record = admission.successor(head)
        lease = msgspec.structs.replace(record.lease, catalog_manifest=ref)
        return admission.Append(
            msgspec.structs.replace(record, lease=lease),
            created=SealCreated(),
            identical=SealExistingIdentical(),
        )

    return await admission.admit(
        authority, proof=proof, decide=decide, what=what, deadline=deadline
    )


async def _already_sealed(
    authority: LeaderLeaseStore, sealed: CatalogManifestRef, manifest: CatalogManifest
) -> SealExistingIdentical:
    """LA-17: sealed once, never changed: the same manifest is ExistingIdentical, another one is
    Refused. The sealed blob is revalidated first."""
    durable = await load_catalog_manifest(authority, sealed)
    if durable != manifest:
        raise Refused(
            f"catalog seal: a different catalog manifest ({sealed.sha256}, "
            f"{sealed.entry_count} entries) is already sealed"
        )
    return SealExistingIdentical()


async def _ensure_blob(authority: LeaderLeaseStore, data: bytes, ref: CatalogManifestRef) -> None:
    """Create the content-addressed blob (an existing one is fine) and read it back: its bytes
    must equal the proposal exactly (LA §4.7 step 5)."""

    async def stored_bytes() -> bytes:
        return (await _read_blob(authority, ref))[1]

    key = catalog_manifest_path(ref.sha256)
    await create_and_read_back(
        authority.store, key, data, stored_bytes, data, what=f"{_MANIFEST} blob {ref.sha256}"
    )
