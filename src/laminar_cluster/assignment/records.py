"""Durable records of the assignment snapshot store (AS §2.3, AS §2.11, AS §2.12).

We use our own compact canonical encoding (`codec.encode`) for every object, as AS §2.12 allows a
pure-Python deployment to, and keep the canonical-body check on every read (`codec.decode`
refuses any body that is not byte-identical to its re-encoding).

Deviations from the Rust field list, all forced by our record rules (a top-level record's first
field is `version: Literal[n]`, dict keys are strings):

* `AssignmentSnapshot.version` is the record schema version (1); the generation is
  `assignment_version`.
* `vnodes: map u32 -> NodeId` is stored dense as `owners` (owner of vnode i at index i), so a
  sparse key set cannot be encoded at all; `model.owners_from_vnode_map` refuses one on input.
* `partitioning_abi_version` is not stored: it is the constant ABI 1 (`digest`).
"""

from __future__ import annotations

import enum
from typing import Literal

from laminar_cluster.codec import I64, U64, Digest32, Record
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition, AssignmentSnapshotRef


class AssignmentSnapshot(Record):
    """One assignment generation: committed, or a draining (intent) generation (AS §2.3)."""

    version: Literal[1]
    assignment_version: U64
    owners: tuple[U64, ...]
    participants: tuple[FenceParticipant, ...]
    updated_at_ms: I64
    draining: bool
    drain_transition: AssignmentDrainTransition | None


class DrainFinalization(Record):
    """The single terminal of one draining version (AS §2.11 `DrainFinalization`)."""

    version: Literal[1]
    transition_digest: Digest32
    proposal: AssignmentSnapshot


class RecoveryMaterialization(Record):
    """An authority-admitted recovery successor installed at its version (AS §2.11)."""

    version: Literal[1]
    proposal: AssignmentSnapshotRef
    snapshot: AssignmentSnapshot


class HeadState(enum.Enum):
    """Which object of the head version decides its effective snapshot (AS §2.11 overlay)."""

    COMMITTED = "committed"  # a committed raw object
    DRAINING = "draining"  # a raw draining object, not finalized yet
    FINALIZED = "finalized"  # a raw draining object and its finalization
    MATERIALIZED = "materialized"  # a recovery materialization


class AssignmentHeadHint(Record):
    """Where the head of the snapshot store stood when it last changed: a change signal that
    watchers read conditionally instead of listing (AS §2.14). Never authoritative: a reader
    that sees it change loads the head through the inventory as always."""

    version: Literal[1]
    assignment_version: U64
    state: HeadState
