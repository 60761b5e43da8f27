"""Limits, encoding and checked reads of the objects of one attempt
(docs/protocols/distributed-checkpoint.md, "Objects"; DC-3, DC-4, DC-16).

Every record is validated before it is written (`codec.encode_checked` within its limit) and
after it is read (bounded GET, strict canonical decode, then the rules below: the record names
the attempt and the participant its path names, a manifest's slices are well formed). A failed
rule is CorruptRecord naming the object. A manifest or a marker of layout 1 (version 1) is
refused with `layout.layout1_error`, never decoded as something else.
`gather_bounded` runs per-object reads and writes concurrently, at most `limit` at a time, in a
TaskGroup, and re-raises the first LaminarError as itself (not as an ExceptionGroup).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.codec import decode, encode_checked, is_sha256_hex
from laminar_cluster.codec.types import Record
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.layout import layout1_error
from laminar_cluster.coordinator.paths import manifest_path, prepare_path
from laminar_cluster.coordinator.records import (
    CheckpointPointer,
    CheckpointPrepare,
    ParticipantManifest,
    SinkCommit,
    VnodeSlice,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError
from laminar_cluster.store import ObjectStore

T = TypeVar("T")
R = TypeVar("R", bound=Record)

MAX_PREPARE_BYTES: Final = 262_144  # two fences of 129 participants, a proof: about 40 KiB
MAX_POINTER_BYTES: Final = MAX_PREPARE_BYTES + 1_024  # a prepare and a verdict
MAX_SLICE_BYTES: Final = 12_582_912  # one vnode's state bytes (12 MiB)
MAX_STATE_BYTES: Final = 1_073_741_824  # one participant's state object of one attempt (1 GiB)
MAX_OUTPUT_BYTES: Final = 50_331_648  # one participant's sink records of one attempt (48 MiB)
# 65,535 slices of about 250 bytes (16 MiB) and the output in base64 (64 MiB).
MAX_MANIFEST_BYTES: Final = 16_777_216 + 67_108_864
MAX_SINK_COMMIT_BYTES: Final = 262_144  # a fence and 129 output digests: about 40 KiB
PREPARE_VERSION: Final = 1
MANIFEST_VERSION: Final = 2
SINK_COMMIT_VERSION: Final = 2
POINTER_VERSION: Final = 1
IO_CONCURRENCY: Final = 32  # per-object requests in flight at once, per caller
# DC-15: the state digest of a vnode cut empty (no state, no offset above 0): it has no bytes
# and restores empty at offset 0. No SHA-256 of any bytes equals it.
EMPTY_STATE_SHA256: Final = "0" * 64

# Canonical JSON starts with the version field: a record of layout 1 is known by this prefix.
_LAYOUT1_PREFIX: Final = b'{"version":1,'
_LAYOUT2_ONLY: Final = (ParticipantManifest, SinkCommit)


def encode_record(record: Record, *, key: str) -> bytes:
    """The canonical bytes of one attempt object, validated within its limit (InvalidArgument)."""
    return encode_checked(record, what=key, max_bytes=_LIMITS[type(record)])


async def read_record(store: ObjectStore, key: str, type_: type[R]) -> tuple[R, bytes] | None:
    """The strictly decoded record at `key` with its exact bytes, or None if absent; a layout 1
    manifest or marker is InvalidArgument (`layout.layout1_error`)."""
    limit = _LIMITS[type_]
    read = await read_bytes(store, key, what=type_.__name__, max_bytes=limit)
    if read is None:
        return None
    body = read[0]
    if type_ in _LAYOUT2_ONLY and body.startswith(_LAYOUT1_PREFIX):
        raise layout1_error(key)
    return decode(body, type_, key=key, max_bytes=limit), body


async def read_prepare(store: ObjectStore, checkpoint_id: int) -> CheckpointPrepare | None:
    key = prepare_path(checkpoint_id)
    read = await read_record(store, key, CheckpointPrepare)
    if read is None:
        return None
    prepare = read[0]
    if prepare.attempt != CheckpointAttempt.canonical(checkpoint_id):
        raise CorruptRecord(f"{key}: prepare names attempt {_name(prepare.attempt)}", key=key)
    return prepare


async def read_manifest(
    store: ObjectStore, attempt: CheckpointAttempt, node_id: int
) -> tuple[ParticipantManifest, bytes] | None:
    """The manifest of `node_id` for `attempt` (shape checked) and its bytes, or None."""
    key = manifest_path(attempt.checkpoint_id, node_id)
    read = await read_record(store, key, ParticipantManifest)
    if read is None:
        return None
    manifest = read[0]
    _require(key, manifest.attempt == attempt, f"manifest names attempt {_name(manifest.attempt)}")
    _require(key, manifest.participant.node_id == node_id, "manifest names another node")
    check_manifest_shape(manifest, key=key)
    return read


def check_manifest_shape(manifest: ParticipantManifest, *, key: str) -> None:
    """DC-16: slices in vnode order; each digest well formed; a vnode cut empty has no holder
    and no offsets; the slices this attempt wrote are this participant's, back to back from 0
    and exactly `state_bytes` long; a reference names an earlier attempt; the output decodes."""
    vnodes = [s.vnode for s in manifest.slices]
    _require(key, vnodes == sorted(set(vnodes)), "manifest vnodes are not sorted and unique")
    checkpoint_id, written = manifest.attempt.checkpoint_id, 0
    for piece in manifest.slices:
        what = f"vnode {piece.vnode}"
        _require(key, is_sha256_hex(piece.state_sha256), f"{what}: malformed state digest")
        slice_offsets(piece, key=key)
        holder = piece.holder
        if holder is None:
            _require(key, piece.state_sha256 == EMPTY_STATE_SHA256, f"{what}: no holder")
            _require(key, not piece.offsets, f"{what}: cut empty but has source offsets")
            continue
        _require(key, piece.state_sha256 != EMPTY_STATE_SHA256, f"{what}: empty with a holder")
        _require(key, holder.length <= MAX_SLICE_BYTES, f"{what}: slice is {holder.length} bytes")
        if holder.checkpoint_id == checkpoint_id:
            _require(key, holder.participant == manifest.participant, f"{what}: foreign slice")
            _require(key, holder.start == written, f"{what}: slice starts at {holder.start}")
            written += holder.length
        else:
            _require(
                key, holder.checkpoint_id < checkpoint_id, f"{what}: references a later attempt"
            )
    _require(
        key,
        written == manifest.state_bytes <= MAX_STATE_BYTES,
        f"manifest slices cover {written} bytes; its state object is {manifest.state_bytes}",
    )
    _require(key, is_sha256_hex(manifest.prepare_sha256), "manifest holds a malformed digest")
    manifest_output(manifest, key=key)


def manifest_output(manifest: ParticipantManifest, *, key: str) -> bytes:
    """The sink records a manifest holds (CorruptRecord if not canonical base64)."""
    data = b64decode(manifest.output_b64, key=key)
    _require(key, len(data) <= MAX_OUTPUT_BYTES, f"output is {len(data)} bytes")
    return data


def slice_offsets(piece: VnodeSlice, *, key: str) -> dict[int, int]:
    """The source offsets of a slice by partition; CorruptRecord if a partition is not
    canonical decimal."""
    offsets: dict[int, int] = {}
    for name, offset in piece.offsets.items():
        _require(
            key, name.isascii() and name.isdigit(), f"source partition {name!r} is not decimal"
        )
        partition = int(name)
        _require(key, str(partition) == name, f"source partition {name!r} is not canonical")
        offsets[partition] = offset
    return offsets


def offsets_of(vnode: int, cut: VnodeCut) -> dict[str, int]:
    """A cut's source offsets as a slice holds them (InvalidArgument for a bad partition)."""
    offsets: dict[str, int] = {}
    for partition, offset in cut.offsets.items():
        if type(partition) is not int or partition < 0:
            raise InvalidArgument(f"vnode {vnode}: source partition {partition!r} is not >= 0")
        offsets[str(partition)] = offset
    return dict(sorted(offsets.items(), key=lambda item: int(item[0])))


def is_empty_cut(vnode: int, cut: VnodeCut) -> bool:
    """DC-15: True for a cut without state; InvalidArgument if it still has an offset above 0."""
    if cut.state is not None:
        return False
    if any(offset != 0 for offset in cut.offsets.values()):
        raise InvalidArgument(f"vnode {vnode}: a cut without state has a source offset above 0")
    return True


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, *, key: str) -> bytes:
    """Canonical base64 only (CorruptRecord otherwise)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CorruptRecord(f"{key}: payload is not valid base64", key=key) from None
    _require(key, base64.b64encode(data).decode("ascii") == text, "payload base64 is not canonical")
    return data


async def gather_bounded(
    calls: Iterable[Callable[[], Awaitable[T]]], *, limit: int = IO_CONCURRENCY
) -> list[T]:
    """Run every call, at most `limit` at once; results in call order. The first LaminarError
    raised by a call is re-raised once all calls ended (the others still run to completion)."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T | LaminarError:
        async with semaphore:
            try:
                return await call()
            except LaminarError as error:
                return error

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(call)) for call in calls]
    results = [task.result() for task in tasks]
    for result in results:
        if isinstance(result, LaminarError):
            raise result
    return results  # type: ignore[return-value]  # no LaminarError is left


def _require(key: str, condition: bool, fact: str) -> None:
    if not condition:
        raise CorruptRecord(f"{key}: {fact}", key=key)


def _name(attempt: CheckpointAttempt) -> str:
    return f"{attempt.epoch}/{attempt.checkpoint_id}"


_LIMITS: Final[dict[type, int]] = {
    CheckpointPrepare: MAX_PREPARE_BYTES,
    ParticipantManifest: MAX_MANIFEST_BYTES,
    SinkCommit: MAX_SINK_COMMIT_BYTES,
    CheckpointPointer: MAX_POINTER_BYTES,
}
