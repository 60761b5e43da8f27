"""Read-side audit: every committed assignment version >= 2 is backed by an authority decision
(AS §2.5, AS §2.6, AS §2.11, AS §4.16; RB-T60 "bare successor").

For each retained version v >= 2 of the inventory:

* a recovery materialization needs a recovery decision at v whose proposal is the
  materialization's reference and whose target is the snapshot's fence;
* a finalized draining object needs a drain decision at v for the raw object's exact
  transition, whose verdict matches the terminal (Commit -> target, Abort -> rollback);
* a draining object without finalization is an open intent: it needs no decision yet;
* a committed raw object (written by plain `save_if_version`) has no drain transition and no
  recovery authority decision, and is always reported.

Decisions come through `DecisionSource` (the leader authority adapter below, or a fake).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from laminar_cluster.assignment.model import validate_snapshot
from laminar_cluster.assignment.snapshot_io import (
    inventory,
    load_finalization,
    load_materialization,
    load_raw,
)
from laminar_cluster.authority.assignment_decisions import (
    assignment_drain_decision,
    assignment_recovery_decision,
)
from laminar_cluster.errors import Refused
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentRecoveryDecision,
    AssignmentVerdict,
    AuthorityAssignmentDecision,
)
from laminar_cluster.store import ObjectStore

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore


class DecisionSource(Protocol):
    async def decision_at(self, target_version: int) -> AuthorityAssignmentDecision | None:
        """The authority decision of `target_version`, or None."""
        ...


@dataclass(frozen=True, slots=True)
class AuthorityDecisions:
    """`DecisionSource` over the leader authority log."""

    authority: LeaderLeaseStore

    async def decision_at(self, target_version: int) -> AuthorityAssignmentDecision | None:
        try:
            return await assignment_drain_decision(self.authority, target_version)
        except Refused:  # settled by recovery, or below the decision floor
            return await assignment_recovery_decision(self.authority, target_version)


@dataclass(frozen=True, slots=True)
class UnbackedVersion:
    version: int
    reason: str


async def audit_authority_backing(
    store: ObjectStore, decisions: DecisionSource
) -> list[UnbackedVersion]:
    """Every retained version >= 2 whose committed generation no authority decision backs."""
    problems: list[UnbackedVersion] = []
    for version in await inventory(store):
        if version < 2:
            continue
        reason = await version_backing_problem(store, decisions, version)
        if reason is not None:
            problems.append(UnbackedVersion(version, reason))
    return problems


async def version_backing_problem(
    store: ObjectStore, decisions: DecisionSource, version: int
) -> str | None:
    """Why retained `version` (>= 2) is not backed by an authority decision, or None."""
    materialized = await load_materialization(store, version)
    if materialized is not None:
        decision = await decisions.decision_at(version)
        if not isinstance(decision, AssignmentRecoveryDecision):
            return "recovery materialization has no recovery authority decision"
        if decision.proposal != materialized.proposal:
            return "recovery materialization is not the admitted proposal"
        if decision.target != validate_snapshot(materialized.snapshot):
            return "recovery materialization is not the admitted target fence"
        return None
    raw = await load_raw(store, version)
    if raw is None:
        return "listed version has no snapshot object"
    if not raw.draining:
        return "no drain transition or recovery authority decision"
    finalization = await load_finalization(store, raw)
    if finalization is None:
        return None  # an open drain intent: no decision yet
    decision = await decisions.decision_at(version)
    if not isinstance(decision, AssignmentDrainDecision):
        return "finalized drain has no drain authority decision"
    if decision.transition != raw.drain_transition:
        return "drain authority decision is for another transition"
    committed = validate_snapshot(finalization.proposal) == decision.transition.target
    if committed != (decision.verdict is AssignmentVerdict.COMMIT):
        return f"drain terminal does not match the authority verdict {decision.verdict.value}"
    return None
