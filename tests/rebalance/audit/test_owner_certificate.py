"""The owner certificate (RB §4.12): exact reports from every participant, and
the stronger vnode-state readiness (RB §2.7). RB-T24 and the async shell."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import msgspec
import pytest

from laminar_cluster.assignment.digest import fence_from_owner_map, owner_map_digest
from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.codec import digest32
from laminar_cluster.errors import Refused, StoreUnavailable
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.audit.owner_certificate import (
    assignment_vnode_state_is_ready,
    certify_owner_map,
    read_owner_certificate,
)
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption
from laminar_cluster.rebalance.refusals import Refusal

replace = msgspec.structs.replace
OWNERS = (1, 2, 1)


def participant(node: int, boot: int | None = None) -> FenceParticipant:
    return FenceParticipant(node_id=node, boot_incarnation=str(uuid.UUID(int=boot or node * 11)))


P1, P2 = participant(1), participant(2)


def report(
    who: FenceParticipant,
    *,
    version: int = 3,
    owners: Sequence[int] = OWNERS,
    ready: bool = True,
) -> CheckpointAssignmentAdoption:
    return CheckpointAssignmentAdoption(
        version=1,
        participant=who,
        assignment_version=version,
        vnode_count=len(owners),
        assignment_digest=digest32(owner_map_digest(len(owners), owners)),
        vnode_state_ready=ready,
    )


def test_rb_t24_fence_requires_exact_reports() -> None:
    roster = (P1, P2)
    exact = [report(P1), report(P2)]
    # Exact reports for p1 and p2: a fence, and semantically ready.
    fence = certify_owner_map(3, OWNERS, roster, exact)
    assert fence == fence_from_owner_map(3, OWNERS, roster)
    assert fence is not None and assignment_vnode_state_is_ready(fence, exact)
    # p2 not ready: still a fence (transport needs only exact adoption), but not ready.
    unready = [report(P1), report(P2, ready=False)]
    fence = certify_owner_map(3, OWNERS, roster, unready)
    assert fence == fence_from_owner_map(3, OWNERS, roster)
    assert fence is not None and not assignment_vnode_state_is_ready(fence, unready)
    # An owner outside the roster, or owner 0.
    assert certify_owner_map(3, (1, 9, 1), roster, exact) is None
    assert certify_owner_map(3, (1, 0, 2), roster, exact) is None
    # A missing report, a stale version, a divergent same-version digest, a restarted p2 boot.
    assert certify_owner_map(3, OWNERS, roster, [report(P1)]) is None
    stale = [report(P1), report(P2, version=2)]
    assert certify_owner_map(3, OWNERS, roster, stale) is None
    divergent = [report(P1), report(P2, owners=(2, 1, 1))]
    assert certify_owner_map(3, OWNERS, roster, divergent) is None
    restarted = [report(P1), report(participant(2, boot=99))]
    assert certify_owner_map(3, OWNERS, roster, restarted) is None
    # The degenerate inputs.
    assert certify_owner_map(0, OWNERS, roster, exact) is None
    assert certify_owner_map(3, (), roster, exact) is None
    assert certify_owner_map(3, OWNERS, (), exact) is None
    # A participant that owns nothing is not an owner-complete roster.
    p3 = participant(3)
    assert certify_owner_map(3, OWNERS, (P1, P2, p3), [*exact, report(p3)]) is None


def test_vnode_state_ready_needs_every_exact_participant() -> None:
    fence = fence_from_owner_map(3, OWNERS, (P1, P2))
    assert not assignment_vnode_state_is_ready(fence, [report(P1)])
    assert not assignment_vnode_state_is_ready(fence, [report(P1), report(participant(2, 99))])
    assert not assignment_vnode_state_is_ready(fence, [report(P1), report(P2, version=4)])
    # Extra reports of other processes do not matter.
    extra = [report(P1), report(P2), report(participant(7), version=1)]
    assert assignment_vnode_state_is_ready(fence, extra)


class FakeReports:
    """The two controller reads, scripted."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.current: tuple[FenceParticipant, ...] = (P1, P2)
        self.reports: tuple[CheckpointAssignmentAdoption, ...] = (report(P1), report(P2))
        self.error: Exception | None = None
        self.hang = False

    async def recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]:
        if self.hang:
            await asyncio.Event().wait()
        found = tuple(p for p in self.current if p.node_id in ids)
        missing = set(ids) - {p.node_id for p in found}
        if missing:
            raise Refused(
                f"no live process incarnation for {sorted(missing)}",
                reason=Refusal.NO_LIVE_INCARNATION,
            )
        return found

    async def read_adopted_assignments(
        self, *, deadline: float
    ) -> tuple[CheckpointAssignmentAdoption, ...]:
        if self.error is not None:
            raise self.error
        return self.reports


def test_compute_fence_fails_closed_on_any_doubt() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        fake = FakeReports(clock)
        registry = RegistrySnapshot(version=3, owners=OWNERS)
        deadline = clock.monotonic() + 5
        expected = fence_from_owner_map(3, OWNERS, (P1, P2))
        compute = read_owner_certificate
        assert await compute(fake, registry, (P1, P2), deadline) == expected
        # A restarted participant: the current roster differs from the expected one.
        fake.current = (P1, participant(2, 99))
        assert await compute(fake, registry, (P1, P2), deadline) is None
        # A missing participant (the exact read raises).
        fake.current = (P1,)
        assert await compute(fake, registry, (P1, P2), deadline) is None
        # A read error.
        fake.current, fake.error = (P1, P2), StoreUnavailable("slots unreadable")
        assert await compute(fake, registry, (P1, P2), deadline) is None
        # The deadline: a hung read yields None once it passes.
        fake.error, fake.hang = None, True
        async with asyncio.TaskGroup() as group:
            task = group.create_task(compute(fake, registry, (P1, P2), deadline))
            await clock.step(6)
        assert task.result() is None
        # A deadline already passed.
        fake.hang = False
        assert await compute(fake, registry, (P1, P2), clock.monotonic()) is None

    asyncio.run(main())


@pytest.mark.parametrize("ready", [True, False])
def test_fence_ignores_the_ready_flag(ready: bool) -> None:
    reports = [report(P1, ready=ready), report(P2, ready=ready)]
    assert certify_owner_map(3, OWNERS, (P1, P2), reports) is not None
