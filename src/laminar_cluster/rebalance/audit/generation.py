"""The authority audit of one assignment generation, whichever kind it is: a drain terminal
(audit/drain.py) or a recovery generation (audit/recovery.py); RB §4.16."""

from __future__ import annotations

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import within_deadline
from laminar_cluster.rebalance.audit.drain import audit_materialized_drain_transition
from laminar_cluster.rebalance.audit.recovery import audit_recovery_generation
from laminar_cluster.rebalance.audit.results import (
    AuditedAssignmentAuthority,
)
from laminar_cluster.rebalance.context import RebalanceContext


async def audit_snapshot_authority_outcome(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, *, deadline: float
) -> AuditedAssignmentAuthority:
    """RB §4.16 `audit_snapshot_authority_outcome`, bounded by `deadline`."""
    version = snapshot.assignment_version
    async with within_deadline(ctx.clock, deadline, f"assignment {version} authority audit"):
        if snapshot.draining or version == 1:
            return AuditedAssignmentAuthority(target_version=version)
        transition = await ctx.snapshots.load_drain_transition(version)
        if transition is None:
            return await audit_recovery_generation(ctx, snapshot)
        terminal = await audit_materialized_drain_transition(ctx, snapshot, transition)
        return AuditedAssignmentAuthority(
            target_version=version, predecessor=transition.predecessor, terminal=terminal
        )
