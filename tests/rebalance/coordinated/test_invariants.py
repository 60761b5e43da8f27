"""Rebalance invariants at startup, graceful exit and coordinated recovery
(docs/protocols/rebalance.md): RB-4 (a draining snapshot never moves ownership) and RB-15 (no
live finalization while recovering; stopped recovery only aborts and yields to a Commit). Real
controllers, authority, snapshot store and BaseEngines on memory://, a simulated clock."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.paths import finalization_path
from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    assignment_drain_decision,
    new_drain_decision,
    record_assignment_drain_decision,
)
from laminar_cluster.errors import InvalidArgument, Refused
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.node.selection import startup_committed_assignment
from laminar_cluster.rebalance.recovery.recover import adopt_any
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.finalize import FinalizeMode, finalize_drain_snapshot
from tests.rebalance.cluster_support import exists
from tests.rebalance.hooks_support import build, drained
from tests.rebalance.refusal_support import raises_because

OWNERS = (1, 2, 1, 2)
ABORT, COMMIT = SourceDrainOutcome.ABORT, SourceDrainOutcome.COMMIT
LIVE, STOPPED = FinalizeMode.LIVE, FinalizeMode.STOPPED_RECOVERY


def test_rb4_a_draining_head_moves_no_ownership() -> None:
    """Draining v2 gives node 2's vnodes to node 1: no engine adopts it, `adopt_any` only
    validates it, startup keeps v1, and node 2 is not drained until the terminal exists."""

    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        v1 = scenario.v1
        draining = await scenario.drain((1, 1, 1, 1))
        for node_id in (1, 2):
            ctx, engine = scenario.ctx(node_id), scenario.engine(node_id)
            with pytest.raises(InvalidArgument):
                await engine.adopt_assignment(draining, deadline=ctx.head_deadline())
            await adopt_any(ctx, draining, deadline=ctx.head_deadline())
            assert (engine.registry().version, engine.registry().owners) == (1, v1.owners)
            assert await startup_committed_assignment(ctx, draining) == v1
        assert not await drained(scenario, 2, authority=True)

        handoff = await scenario.checkpoint(snapshot_fence(v1))
        ctx = scenario.ctx(1)
        assert await finalize_drain_snapshot(ctx, draining, v1, COMMIT, handoff, LIVE) == 2
        assert await drained(scenario, 2, authority=True)

    asyncio.run(main())


def test_rb15_no_live_finalization_while_recovering() -> None:
    """While recovering, a live finalization records nothing, whichever verdict it asks for;
    stopped recovery only aborts, and over a Commit decision it yields with the head still
    draining."""

    async def main() -> None:
        scenario = await build((1, 2), OWNERS)
        cluster, v1 = scenario.cluster, scenario.v1
        draining = await scenario.drain((1, 1, 1, 1))
        transition = draining.drain_transition
        assert transition is not None
        handoff = await scenario.checkpoint(transition.predecessor)
        ctx = scenario.ctx(1)
        authority = cluster.node(1).authority
        record = await authority.load_record()

        ctx.controller.set_recovering(True)
        for requested, cut in ((ABORT, None), (COMMIT, handoff)):
            with raises_because(Refused, Refusal.YIELDED_TO_RECOVERY):
                await finalize_drain_snapshot(ctx, draining, v1, requested, cut, LIVE)
        assert await authority.load_record() == record
        assert await assignment_drain_decision(authority, 2) is None
        with pytest.raises(InvalidArgument):  # stopped recovery never asks for a Commit
            await finalize_drain_snapshot(ctx, draining, v1, COMMIT, handoff, STOPPED)

        proof = transition.leader
        commit = new_drain_decision(transition, proof, AssignmentVerdict.COMMIT, handoff)
        recorded = await record_assignment_drain_decision(
            authority, proof, commit, deadline=cluster.deadline()
        )
        assert isinstance(recorded, DecisionCreated)
        with raises_because(Refused, Refusal.COMMIT_WINNER):
            await finalize_drain_snapshot(ctx, draining, v1, ABORT, None, STOPPED)
        assert await cluster.snapshots.load() == draining
        assert not await exists(cluster.store, finalization_path(2))

    asyncio.run(main())
