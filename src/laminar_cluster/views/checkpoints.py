"""The checkpoint outcomes of a namespace, audited, for `laminar-cluster checkpoints`.

Outcomes live in two places, and the view shows both, labelled:

* cluster outcomes: the commit and abort decisions of distributed checkpoints, admitted
  through the leader authority log (`control/leader-lease/`; what `authority` lists). Each is
  checked with `views.references` (deployment id; a Commit's recovery capsule resolves and
  matches; the newest Commit's participant manifests resolve and match);
* local outcomes: the decision store's own `checkpoint-outcomes/` (a single process's
  checkpoints), with the retention floor and its anchors.

Read-only: unlike the store's own operations it never creates the deployment identity. It
reads the identity to learn the allocator mode, opens the decision store in that mode and
audits the floor, every local outcome (anchors included), the sink-open witness and, in local
mode, the ID block listing. Any malformed or foreign record is a problem naming the object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from laminar_cluster.checkpoint import AllocatorMode, DecisionStore
from laminar_cluster.checkpoint.floor import read_floor
from laminar_cluster.checkpoint.identity import read_identity
from laminar_cluster.checkpoint.paths import BLOCKS_PREFIX, parse_block_path
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord, InventoryChanged
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.lease import audit_stable, decisions_of
from laminar_cluster.views.read_only import ReadOnlyStore
from laminar_cluster.views.references import check_authority_references, peek_identity


@dataclass
class CheckpointReport:
    store: str
    deployment_id: str | None = None
    allocator_mode: str | None = None
    last_allocated_id: int | None = None
    floor_before_epoch: int = 0
    boundary: dict[str, int | None] = field(default_factory=dict)
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # local (decision store)
    cluster_outcomes: list[dict[str, Any]] = field(default_factory=list)  # leader authority
    open_witness: dict[str, Any] | None = None
    id_blocks: int | None = None
    problems: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, key: str | None, kind: str, error: str) -> None:
        self.problems.append({"object": key, "kind": kind, "error": error})


async def inspect_checkpoints(store: ObjectStore, clock: Clock) -> CheckpointReport:
    """Both kinds of outcomes, audited (module docstring)."""
    store = ReadOnlyStore(store)
    report = CheckpointReport(store=store.url)
    try:
        identity = await peek_identity(store)
        if identity is not None:
            mode = identity.allocator_mode
            report.deployment_id, report.allocator_mode = identity.id, mode.value
            if mode is AllocatorMode.NATIVE_CAS:
                report.last_allocated_id = identity.checkpoint_id
            decisions = DecisionStore(store, clock=clock, mode=mode)
            await read_identity(decisions.ctx)  # validates the identity as the store would
            await _audit(decisions, report)
    except (CorruptRecord, InventoryChanged) as error:
        key = error.key if isinstance(error, CorruptRecord) else None
        report.problem(key, type(error).__name__, str(error))
    await _cluster_outcomes(store, clock, report)
    return report


async def _cluster_outcomes(store: ObjectStore, clock: Clock, report: CheckpointReport) -> None:
    """The outcomes the authority log admitted, the live ones with their references checked."""
    audit = await audit_stable(store, clock)
    await check_authority_references(store, clock, audit)
    for problem in audit.problems:
        report.problem(problem.object, "CorruptRecord", problem.error)
    for row in decisions_of(audit)["outcomes"]:
        record = audit.records[row["sequence"]]
        capsule = (
            None
            if record.checkpoint_outcome is None
            else record.checkpoint_outcome.recovery_capsule
        )
        report.cluster_outcomes.append(
            {**row, "recovery_capsule": None if capsule is None else capsule.sha256}
        )


async def _audit(decisions: DecisionStore, report: CheckpointReport) -> None:
    floor = await read_floor(decisions.ctx)
    report.floor_before_epoch = floor.record.before_epoch if floor else 0
    boundary = await decisions.outcome_retention_boundary()
    report.boundary = {
        "before_epoch": boundary.before_epoch,
        "committed_checkpoint_id": boundary.committed_checkpoint_id,
        "highest_closed_epoch": boundary.highest_closed_epoch,
    }
    for outcome in await decisions.audited_outcomes():
        report.outcomes.append(_outcome_row(outcome, report.floor_before_epoch))
    witness = await decisions.sink_open_witness()
    if witness is not None:
        report.open_witness = {
            "checkpoint_id": witness.attempt.checkpoint_id,
            "participant_id": witness.participant_id,
            "sinks": list(witness.committable_sinks),
        }
    if decisions.mode is AllocatorMode.LOCAL_SINGLE_WRITER:
        blocks = await decisions.store.list(BLOCKS_PREFIX)
        for meta in blocks:
            parse_block_path(meta.key)
        report.id_blocks = len(blocks)


def _outcome_row(outcome: CheckpointOutcome, floor_before_epoch: int) -> dict[str, Any]:
    return {
        "epoch": outcome.epoch,
        "checkpoint_id": outcome.checkpoint_id,
        "verdict": outcome.verdict.value,
        "scope": outcome.scope.value,
        "anchor": outcome.epoch < floor_before_epoch,
        "recovery_capsule": outcome.recovery_capsule.sha256 if outcome.recovery_capsule else None,
    }
