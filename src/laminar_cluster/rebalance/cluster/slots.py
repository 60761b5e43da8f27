"""Durable per-process control slots (RB §2.7, RB §4.6).

Each node id owns two objects under `control/processes/node={id:020}/`:

| path | record | writer |
|---|---|---|
| `adopted-assignment.json` | `CheckpointAssignmentAdoption` | the node's current process |
| `drain-ack.json` | `DrainAck` | the node's current process |

A write is an unconditional OVERWRITE of the writer's own slot followed by an exact read-back:
the object must hold exactly the bytes written, or the write did not take effect as ours: no
object is StoreUnavailable (retry), other bytes mean a second process with the same node id
overwrote it, and the caller gets `Fenced` (SLOT_WRITTEN_BY_ANOTHER_PROCESS). The
record names its exact publisher (node and boot), so a restarted process's older report never
counts for the new boot.

Reads make one bounded listing of `control/processes/` and read the slots of the asked kind. They
fail closed: an unparseable key, a malformed or non-canonical record, or a record whose
publisher node differs from its path raises `CorruptRecord`; nothing is skipped silently.
"""

from __future__ import annotations

import contextlib
import enum
import re
from typing import Final, TypeVar

from laminar_cluster.assignment.vnode import MAX_VNODE_COUNT
from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import Record, decode, encode_checked
from laminar_cluster.errors import (
    CorruptRecord,
    Fenced,
    InvalidArgument,
    ObjectNotFound,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.validate_decisions import drain_transition_problem, uuid_is_canonical
from laminar_cluster.membership.discovery import MEMBERSHIP_NODES_MAX
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption, DrainAck
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import OVERWRITE, ObjectStore, ReadBack, read_back

PROCESSES_PREFIX: Final = "control/processes/"
# Two slots per node id, and at most MEMBERSHIP_NODES_MAX node ids.
PROCESS_SLOTS_MAX: Final = 2 * MEMBERSHIP_NODES_MAX
# A drain ack carries two fences of up to 129 participants each (~10 KiB apiece).
MAX_PROCESS_SLOT_BYTES: Final = 65_536

_SLOT = re.compile(r"control/processes/node=([0-9]{20})/(adopted-assignment|drain-ack)\.json")

R = TypeVar("R", CheckpointAssignmentAdoption, DrainAck)


class SlotKind(enum.Enum):
    ADOPTED_ASSIGNMENT = "adopted-assignment"
    DRAIN_ACK = "drain-ack"


def process_slot_path(node: int, kind: SlotKind) -> str:
    if not 0 < node <= U64_MAX:
        raise InvalidArgument(f"node id {node} is not a nonzero u64")
    return f"{PROCESSES_PREFIX}node={node:020d}/{kind.value}.json"


def parse_process_slot_path(path: str) -> tuple[int, SlotKind]:
    """(node, kind) of a slot path; re-formats and compares, so only canonical keys parse."""
    match = _SLOT.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not a canonical process slot path", key=path)
    node, kind = int(match.group(1)), SlotKind(match.group(2))
    if not 0 < node <= U64_MAX or process_slot_path(node, kind) != path:
        raise CorruptRecord(f"{path}: not a canonical process slot path", key=path)
    return node, kind


def _participant_problem(participant: FenceParticipant) -> str | None:
    if participant.node_id == 0:
        return "publisher node id is 0"
    if not uuid_is_canonical(participant.boot_incarnation):
        return f"publisher boot {participant.boot_incarnation!r} is not a canonical UUID"
    return None


def adoption_problem(adoption: CheckpointAssignmentAdoption) -> str | None:
    """RB §2.7 canonical: node and boot set, version nonzero, vnode count valid, digest nonzero."""
    problem = _participant_problem(adoption.participant)
    if problem is not None:
        return problem
    if adoption.assignment_version == 0:
        return "assignment version is 0"
    if not 1 <= adoption.vnode_count <= MAX_VNODE_COUNT:
        return f"vnode count {adoption.vnode_count} is outside 1..={MAX_VNODE_COUNT}"
    if not any(adoption.assignment_digest):
        return "assignment digest is all zero"
    return None


def drain_ack_problem(ack: DrainAck) -> str | None:
    """A canonical publisher and a canonical transition (RB §2.4, RB §4.6)."""
    return _participant_problem(ack.participant) or drain_transition_problem(ack.transition)


def _problem(record: Record) -> str | None:
    if isinstance(record, CheckpointAssignmentAdoption):
        return adoption_problem(record)
    assert isinstance(record, DrainAck)
    return drain_ack_problem(record)


async def write_process_slot(
    store: ObjectStore,
    clock: Clock,
    record: CheckpointAssignmentAdoption | DrainAck,
    *,
    deadline: float,
) -> None:
    """OVERWRITE the publisher's own slot, then read it back exactly (RB §2.7)."""
    kind = (
        SlotKind.ADOPTED_ASSIGNMENT
        if isinstance(record, CheckpointAssignmentAdoption)
        else SlotKind.DRAIN_ACK
    )
    key = process_slot_path(record.participant.node_id, kind)
    problem = _problem(record)
    if problem is not None:
        raise InvalidArgument(f"{key}: {problem}")
    body = encode_checked(record, what=key, max_bytes=MAX_PROCESS_SLOT_BYTES)
    async with within_deadline(clock, deadline, f"{key}: write"):
        with contextlib.suppress(WriteOutcomeUnknown):  # settled by the read-back below
            await store.put(key, body, OVERWRITE)
        resolution = await read_back(store, key, body)
    if resolution.state is ReadBack.ABSENT:
        raise StoreUnavailable(f"{key}: the write did not land (read-back found no object)")
    if not resolution.ours:
        raise Fenced(
            f"{key}: read-back after the write found {resolution.state.value} bytes; another "
            f"process of node {record.participant.node_id} writes this slot",
            reason=Refusal.SLOT_WRITTEN_BY_ANOTHER_PROCESS,
        )


async def read_adopted_assignments(
    store: ObjectStore, clock: Clock, *, deadline: float
) -> tuple[CheckpointAssignmentAdoption, ...]:
    """Every node's adoption report, by node id (RB §2.7)."""
    return await _read_kind(
        store, clock, SlotKind.ADOPTED_ASSIGNMENT, CheckpointAssignmentAdoption, deadline
    )


async def read_drain_acks(
    store: ObjectStore, clock: Clock, *, deadline: float
) -> tuple[DrainAck, ...]:
    """Every node's latest drain ack, by node id (RB §4.6)."""
    return await _read_kind(store, clock, SlotKind.DRAIN_ACK, DrainAck, deadline)


async def _read_kind(
    store: ObjectStore, clock: Clock, kind: SlotKind, type_: type[R], deadline: float
) -> tuple[R, ...]:
    found: list[R] = []
    async with within_deadline(clock, deadline, f"{PROCESSES_PREFIX}{kind.value} slots"):
        metas = await store.list(PROCESSES_PREFIX, limit=PROCESS_SLOTS_MAX + 1)
        if len(metas) > PROCESS_SLOTS_MAX:
            raise CorruptRecord(
                f"{PROCESSES_PREFIX}: more than {PROCESS_SLOTS_MAX} process slot objects",
                key=PROCESSES_PREFIX,
            )
        seen: set[int] = set()
        for meta in metas:
            node, slot_kind = parse_process_slot_path(meta.key)
            if slot_kind is not kind:
                continue
            if node in seen:
                raise CorruptRecord(f"{meta.key}: listed twice", key=meta.key)
            seen.add(node)
            record = await _read_slot(store, meta.key, node, type_)
            if record is not None:
                found.append(record)
    return tuple(found)


async def _read_slot(store: ObjectStore, key: str, node: int, type_: type[R]) -> R | None:
    try:
        got = await store.get(key, end=MAX_PROCESS_SLOT_BYTES + 1)
    except ObjectNotFound:
        return None  # deleted between the listing and the read
    record = decode(got.body, type_, key=key, max_bytes=MAX_PROCESS_SLOT_BYTES)
    problem = _problem(record)
    if problem is not None:
        raise CorruptRecord(f"{key}: {problem}", key=key)
    if record.participant.node_id != node:
        raise CorruptRecord(
            f"{key}: published by node {record.participant.node_id}, not by node {node}",
            key=key,
        )
    return record
