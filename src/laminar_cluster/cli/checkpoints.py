"""`laminar-cluster checkpoints --store URL`: the decision store of a namespace, audited.

Read-only: unlike the store's own operations, it never creates the deployment identity. It
reads the identity to learn the allocator mode, opens the store in that mode, and audits the
floor, every outcome (anchors included), the sink-open witness and, in local mode, the ID block
listing. Any malformed or foreign record makes it print the object's path and exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from laminar_cluster.checkpoint import AllocatorMode, DecisionStore
from laminar_cluster.checkpoint.floor import read_floor
from laminar_cluster.checkpoint.identity import read_identity
from laminar_cluster.checkpoint.paths import BLOCKS_PREFIX, IDENTITY_PATH, parse_block_path
from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import CheckpointOutcome, DeploymentIdentity
from laminar_cluster.clock import RealClock
from laminar_cluster.codec import decode
from laminar_cluster.errors import CorruptRecord, InventoryChanged
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.output import console, print_json, run_on_store


@dataclass
class CheckpointReport:
    store: str
    deployment_id: str | None = None
    allocator_mode: str | None = None
    last_allocated_id: int | None = None
    floor_before_epoch: int = 0
    boundary: dict[str, int | None] = field(default_factory=dict)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    open_witness: dict[str, Any] | None = None
    id_blocks: int | None = None
    problems: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


async def inspect_checkpoints(store: ObjectStore) -> CheckpointReport:
    report = CheckpointReport(store=store.url)
    try:
        identity = await _peek_identity(store)
        if identity is None:
            return report
        mode = identity.allocator_mode
        report.deployment_id, report.allocator_mode = identity.id, mode.value
        if mode is AllocatorMode.NATIVE_CAS:
            report.last_allocated_id = identity.checkpoint_id
        decisions = DecisionStore(store, clock=RealClock(), mode=mode)
        await read_identity(decisions.ctx)  # validates the identity as the store itself would
        await _audit(decisions, report)
    except (CorruptRecord, InventoryChanged) as error:
        key = error.key if isinstance(error, CorruptRecord) else None
        report.problems.append({"object": key, "kind": type(error).__name__, "error": str(error)})
    return report


async def _peek_identity(store: ObjectStore) -> DeploymentIdentity | None:
    read = await read_bytes(store, IDENTITY_PATH, what="deployment identity", max_bytes=1024)
    if read is None:
        return None
    return decode(read[0], DeploymentIdentity, key=IDENTITY_PATH, max_bytes=1024)


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


def run_checkpoints(url: str, *, as_json: bool) -> int:
    report = run_on_store(url, inspect_checkpoints)
    if as_json:
        print_json({"ok": report.ok, **report.__dict__})
    else:
        _print(report)
    return 0 if report.ok else 1


def _print(report: CheckpointReport) -> None:
    console.print(f"store            {report.store}")
    if report.deployment_id is None and report.ok:
        console.print("no deployment identity: no checkpoint has been taken in this namespace")
        return
    console.print(f"deployment       {report.deployment_id}")
    console.print(f"allocator mode   {report.allocator_mode}")
    if report.last_allocated_id is not None:
        console.print(f"last allocated   {report.last_allocated_id}")
    if report.id_blocks is not None:
        console.print(f"ID blocks        {report.id_blocks}")
    console.print(f"retention floor  before epoch {report.floor_before_epoch}  {report.boundary}")
    if report.open_witness is not None:
        console.print(f"open witness     {report.open_witness}")
    table = Table(title=f"{len(report.outcomes)} outcomes (anchors below the floor marked)")
    for column in ("epoch", "checkpoint", "verdict", "scope", "anchor"):
        table.add_column(column)
    for row in report.outcomes:
        table.add_row(
            str(row["epoch"]),
            str(row["checkpoint_id"]),
            row["verdict"],
            row["scope"],
            "anchor" if row["anchor"] else "",
        )
    console.print(table)
    for problem in report.problems:
        console.print(f"[red]AUDIT FAILED[/red] {problem['object']}: {problem['error']}")
