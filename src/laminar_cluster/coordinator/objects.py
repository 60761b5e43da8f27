"""Limits, encoding and checked reads of the objects of one attempt
(docs/protocols/distributed-checkpoint.md, "Objects"; DC-3, DC-4).

Every record is validated before it is written (`codec.encode_checked` within its limit) and
after it is read (bounded GET, strict canonical decode, then the rules below: the record names
the attempt and the participant its path names). A failed rule is CorruptRecord naming the object.
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
from laminar_cluster.codec import decode, encode_checked, is_sha256_hex, sha256_hex
from laminar_cluster.codec.types import Record
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.paths import (
    manifest_path,
    output_path,
    partial_path,
    prepare_path,
)
from laminar_cluster.coordinator.records import (
    CheckpointPrepare,
    ParticipantManifest,
    SinkCommit,
    SinkOutput,
    VnodePartial,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument, LaminarError
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.store import ObjectStore

T = TypeVar("T")
R = TypeVar("R", bound=Record)

MAX_PREPARE_BYTES: Final = 262_144  # two fences of 129 participants, a proof: about 40 KiB
MAX_PARTIAL_BYTES: Final = 16_777_216  # one vnode's state (base64) and offsets
MAX_OUTPUT_BYTES: Final = 67_108_864  # one participant's sink records of one attempt (base64)
MAX_MANIFEST_BYTES: Final = 8_388_608  # 65,535 vnodes with their digests: about 4.8 MiB
MAX_SINK_COMMIT_BYTES: Final = 262_144  # a fence and 129 output digests: about 40 KiB
RECORD_VERSION: Final = 1
IO_CONCURRENCY: Final = 32  # per-object requests in flight at once, per caller
# DC-15: the manifest digest of a vnode cut empty (no state, no offset above 0): no partial
# object exists for it, and it restores empty at offset 0. No SHA-256 of a partial equals it.
EMPTY_PARTIAL_SHA256: Final = "0" * 64


def encode_record(record: Record, *, key: str) -> bytes:
    """The canonical bytes of one attempt object, validated within its limit (InvalidArgument)."""
    return encode_checked(record, what=key, max_bytes=_LIMITS[type(record)])


async def read_record(store: ObjectStore, key: str, type_: type[R]) -> tuple[R, bytes] | None:
    """The strictly decoded record at `key` with its exact bytes, or None if absent."""
    limit = _LIMITS[type_]
    read = await read_bytes(store, key, what=type_.__name__, max_bytes=limit)
    if read is None:
        return None
    body = read[0]
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
    vnodes = list(manifest.vnodes)
    _require(key, vnodes == sorted(set(vnodes)), "manifest vnodes are not sorted and unique")
    _require(
        key,
        len(manifest.partial_sha256) == len(vnodes),
        f"manifest has {len(manifest.partial_sha256)} partial digests for {len(vnodes)} vnodes",
    )
    digests = (*manifest.partial_sha256, manifest.output_sha256)
    _require(key, all(is_sha256_hex(d) for d in digests), "manifest holds a malformed digest")
    return read


async def read_partial(
    store: ObjectStore,
    attempt: CheckpointAttempt,
    vnode: int,
    participant: FenceParticipant,
    expected_sha256: str,
) -> VnodePartial:
    """The partial of `vnode`, whose bytes must hash to `expected_sha256` (DC-3)."""
    key = partial_path(attempt.checkpoint_id, vnode)
    read = await read_record(store, key, VnodePartial)
    if read is None:
        raise CorruptRecord(f"{key}: vnode partial is missing", key=key)
    partial, body = read
    _require(key, sha256_hex(body) == expected_sha256, "partial does not match its manifest digest")
    _require(key, partial.attempt == attempt, f"partial names attempt {_name(partial.attempt)}")
    _require(key, partial.vnode == vnode, f"partial names vnode {partial.vnode}")
    _require(key, partial.participant == participant, "partial names another participant")
    vnode_cut(partial, key=key)  # the state and offsets decode
    return partial


async def read_output(
    store: ObjectStore,
    attempt: CheckpointAttempt,
    participant: FenceParticipant,
    expected_sha256: str,
) -> bytes:
    """The sink records of `participant` for `attempt`, whose object hashes to the digest."""
    key = output_path(attempt.checkpoint_id, participant.node_id)
    read = await read_record(store, key, SinkOutput)
    if read is None:
        raise CorruptRecord(f"{key}: sink output is missing", key=key)
    output, body = read
    _require(key, sha256_hex(body) == expected_sha256, "output does not match its manifest digest")
    _require(key, output.attempt == attempt, f"output names attempt {_name(output.attempt)}")
    _require(key, output.participant == participant, "output names another participant")
    return _b64decode(output.records_b64, key=key)


def is_empty_cut(vnode: int, cut: VnodeCut) -> bool:
    """DC-15: True for a cut without state; InvalidArgument if it still has an offset above 0."""
    if cut.state is not None:
        return False
    if any(offset != 0 for offset in cut.offsets.values()):
        raise InvalidArgument(f"vnode {vnode}: a cut without state has a source offset above 0")
    return True


def partial_of(
    attempt: CheckpointAttempt, vnode: int, participant: FenceParticipant, cut: VnodeCut
) -> VnodePartial:
    if cut.state is None:
        raise InvalidArgument(f"vnode {vnode}: a cut without state has no partial (DC-15)")
    offsets: dict[str, int] = {}
    for partition, offset in cut.offsets.items():
        if type(partition) is not int or partition < 0:
            raise InvalidArgument(f"vnode {vnode}: source partition {partition!r} is not >= 0")
        offsets[str(partition)] = offset
    return VnodePartial(
        version=RECORD_VERSION,
        attempt=attempt,
        vnode=vnode,
        participant=participant,
        state_b64=base64.b64encode(cut.state).decode("ascii"),
        offsets=offsets,
    )


def output_of(attempt: CheckpointAttempt, participant: FenceParticipant, data: bytes) -> SinkOutput:
    return SinkOutput(
        version=RECORD_VERSION,
        attempt=attempt,
        participant=participant,
        records_b64=base64.b64encode(data).decode("ascii"),
    )


def vnode_cut(partial: VnodePartial, *, key: str) -> VnodeCut:
    """The state and offsets a partial holds; CorruptRecord if either is not canonical."""
    offsets: dict[int, int] = {}
    for name, offset in partial.offsets.items():
        _require(
            key, name.isascii() and name.isdigit(), f"source partition {name!r} is not decimal"
        )
        partition = int(name)
        _require(key, str(partition) == name, f"source partition {name!r} is not canonical")
        offsets[partition] = offset
    return VnodeCut(state=_b64decode(partial.state_b64, key=key), offsets=offsets)


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


def _b64decode(text: str, *, key: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CorruptRecord(f"{key}: payload is not valid base64", key=key) from None
    _require(key, base64.b64encode(data).decode("ascii") == text, "payload base64 is not canonical")
    return data


def _require(key: str, condition: bool, fact: str) -> None:
    if not condition:
        raise CorruptRecord(f"{key}: {fact}", key=key)


def _name(attempt: CheckpointAttempt) -> str:
    return f"{attempt.epoch}/{attempt.checkpoint_id}"


_LIMITS: Final[dict[type, int]] = {
    CheckpointPrepare: MAX_PREPARE_BYTES,
    VnodePartial: MAX_PARTIAL_BYTES,
    SinkOutput: MAX_OUTPUT_BYTES,
    ParticipantManifest: MAX_MANIFEST_BYTES,
    SinkCommit: MAX_SINK_COMMIT_BYTES,
}
