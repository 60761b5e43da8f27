"""`laminar-cluster checkpoints --store URL`: the checkpoint outcomes of a namespace, audited
(`views.checkpoints`): cluster outcomes from the leader authority log and local ones from the
decision store, labelled; identity, mode, retention floor, the sink-open witness. Read-only;
exit 1 naming the object on a bad record or a reference that does not resolve."""

from __future__ import annotations

from typing import Any

from laminar_cluster.clock import RealClock
from laminar_cluster.views.checkpoints import CheckpointReport, inspect_checkpoints
from laminar_cluster.views.output import (
    cell,
    console,
    print_json,
    run_on_store,
    say_problem,
    show,
    table,
)


def run_checkpoints(url: str, *, as_json: bool) -> int:
    report = run_on_store(
        url, lambda store: inspect_checkpoints(store, RealClock()), must_exist=True
    )
    if as_json:
        print_json({"ok": report.ok, **report.__dict__})
    else:
        _print(report)
    return 0 if report.ok else 1


def _say(label: str, value: Any) -> None:
    console.print(f"{label:<16} {cell(value)}", markup=False, highlight=False, soft_wrap=True)


def _print(report: CheckpointReport) -> None:
    _say("store", report.store)
    if report.deployment_id is None and report.ok and not report.cluster_outcomes:
        console.print("no deployment identity: no checkpoint has been taken in this namespace")
        return
    _say("deployment", report.deployment_id)
    _say("allocator mode", report.allocator_mode)
    if report.last_allocated_id is not None:
        _say("last allocated", report.last_allocated_id)
    if report.id_blocks is not None:
        _say("ID blocks", report.id_blocks)
    _print_cluster(report)
    _print_local(report)
    for problem in report.problems:
        say_problem("AUDIT FAILED", problem["object"], str(problem["error"]))
    if report.ok:
        console.print("every outcome and the references it makes check out", style="green")


def _print_cluster(report: CheckpointReport) -> None:
    rows = report.cluster_outcomes
    commits = sum(1 for row in rows if row["verdict"] == "commit")
    title = (
        f"cluster outcomes (leader authority log): {len(rows)}, {commits} commits, "
        f"{len(rows) - commits} aborts"
    )
    if not rows:
        console.print(f"{title}")
        return
    outcomes = table("sequence", "epoch", "checkpoint", "verdict", "live", "capsule", title=title)
    for row in rows:
        outcomes.add_row(
            cell(row["sequence"]),
            cell(row["epoch"]),
            cell(row["checkpoint_id"]),
            row["verdict"],
            cell(row["live"]),
            cell(row["recovery_capsule"]),
        )
    show(outcomes)


def _print_local(report: CheckpointReport) -> None:
    boundary = report.boundary
    _say(
        "retention floor",
        f"before epoch {report.floor_before_epoch} (boundary before epoch "
        f"{cell(boundary.get('before_epoch'))}, committed checkpoint "
        f"{cell(boundary.get('committed_checkpoint_id')) or 'none'}, highest closed epoch "
        f"{cell(boundary.get('highest_closed_epoch')) or 'none'})",
    )
    witness = report.open_witness
    if witness is not None:
        _say(
            "open witness",
            f"checkpoint {witness['checkpoint_id']}, participant {witness['participant_id']}, "
            f"sinks {cell(witness['sinks']) or 'none'}",
        )
    title = f"local outcomes (decision store): {len(report.outcomes)} (anchors below the floor)"
    if not report.outcomes:
        console.print(title)
        return
    outcomes = table("epoch", "checkpoint", "verdict", "scope", "anchor", title=title)
    for row in report.outcomes:
        outcomes.add_row(
            cell(row["epoch"]),
            cell(row["checkpoint_id"]),
            row["verdict"],
            row["scope"],
            "anchor" if row["anchor"] else "",
        )
    show(outcomes)
