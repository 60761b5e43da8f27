"""The leader authority's invariants under randomly injected store faults (FaultyStore).

Two processes (owners A and B, each its own SimulatedClock and FaultyStore client over one
memory store) run a seeded random schedule of term starts, renewals, takeovers and cluster
outcome decisions while every request may fail before it applies, lose its response after it
applied, or report a conflict for a write that landed. Whatever the faults:

- LA-1/LA-2: the durable log has one record per sequence, contiguous from 1 to the head;
- LA-4: tokens never decrease along the log, and each token belongs to exactly one owner;
- LA-5: every admitted outcome's proof is the lease of the record that admitted it;
- LA-13: at most one outcome per epoch, and every caller that got an answer was told the
  durable one.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointVerdict,
    Conflict,
    Created,
    Unchanged,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    DeadlineExceeded,
    Fenced,
    InventoryChanged,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.log import load_published_head, read_record
from laminar_cluster.lease.outcomes import Acquired, LeaderLeaseObservation
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.store.faulty import FaultConfig, FaultyStore
from laminar_cluster.store.obstore_backend import ObstoreStore
from tests.checkpoint.test_capsule import FENCE
from tests.lease.pausing_store import TTL_S, A, B

FAULTS = FaultConfig(error_before_rate=0.08, error_after_rate=0.08, conflict_after_rate=0.04)
# What a caller may see from one operation under faults; anything else fails the test.
EXPECTED = (StoreUnavailable, WriteOutcomeUnknown, Fenced, DeadlineExceeded, InventoryChanged)


class Process:
    def __init__(self, inner: ObstoreStore, who: LeaderLeaseOwner, seed: int) -> None:
        self.who = who
        self.clock = SimulatedClock(seed=seed)
        store = FaultyStore(inner, clock=self.clock, seed=seed, config=FAULTS)
        self.faulty = store
        decisions = DecisionStore.shared(store, clock=self.clock)
        self.authority = LeaderLeaseStore(store, clock=self.clock, ttl_s=TTL_S, decisions=decisions)
        self.proof: LeaderProof | None = None
        self.observation: LeaderLeaseObservation | None = None

    def deadline(self) -> float:
        return self.clock.monotonic() + 60

    async def lease_step(self) -> None:
        if self.observation is not None:
            self.clock.advance(TTL_S + 0.01)
            outcome = await self.authority.try_takeover(
                self.who, self.observation, deadline=self.deadline()
            )
        elif self.proof is not None:
            outcome = await self.authority.renew_exact(
                self.who, self.proof.fencing_token, deadline=self.deadline()
            )
        else:
            outcome = await self.authority.begin_new_term(self.who, deadline=self.deadline())
        if isinstance(outcome, Acquired):
            self.proof, self.observation = outcome.lease.proof(), None
        elif outcome.lease.owner == self.who:
            # Our own earlier takeover landed although its answer was lost: as the manager
            # does, begin a new term next (which rotates the token).
            self.proof, self.observation = None, None
        else:
            self.proof = None
            self.observation = self.authority.observe_rival(self.who, outcome.lease)


async def schedule(seed: int) -> None:
    inner = ObstoreStore.memory()
    processes = [Process(inner, A, seed * 2 + 1), Process(inner, B, seed * 2 + 2)]
    rng = random.Random(seed)
    told: dict[int, list[CheckpointOutcome]] = {}
    epoch = 0
    for _ in range(60):
        process = rng.choice(processes)
        try:
            if process.proof is not None and rng.random() < 0.5:
                epoch += rng.choice((0, 1))  # sometimes retry the same epoch
                epoch = max(epoch, 1)
                result = await record_cluster_outcome(
                    process.authority,
                    process.proof,
                    epoch=epoch,
                    checkpoint_id=epoch,
                    assignment_fence=FENCE,
                    verdict=CheckpointVerdict.ABORT,
                    recovery_capsule=None,
                    deadline=process.deadline(),
                )
                winner = result.winner if isinstance(result, Conflict) else result.outcome
                assert isinstance(result, Created | Unchanged | Conflict)
                told.setdefault(epoch, []).append(winner)
            else:
                await process.lease_step()
        except Fenced:
            process.proof = None  # LA-6: a fenced term never acts again
        except Refused:
            epoch += 1  # a non-advancing epoch after another term's outcome: move on
        except EXPECTED:
            process.proof = None if rng.random() < 0.5 else process.proof
    injected = sum(sum(p.faulty.stats.injected.values()) for p in processes)
    assert injected > 0 and told, (injected, told)  # the schedule really ran into faults
    await check_log(inner, told)


async def check_log(inner: ObstoreStore, told: dict[int, list[CheckpointOutcome]]) -> None:
    head = await load_published_head(inner, SimulatedClock(seed=999))
    if head is None:
        return
    owners: dict[int, LeaderLeaseOwner] = {}
    outcomes: dict[int, CheckpointOutcome] = {}
    last_token = 0
    for seq in range(1, head.record.lease.seq + 1):
        record = await read_record(inner, seq)
        assert record is not None, f"sequence {seq} is missing below head {head.record.lease.seq}"
        lease = record.lease
        assert lease.token >= last_token, f"token regressed at {seq}"  # LA-4
        assert owners.setdefault(lease.token, lease.owner) == lease.owner  # one owner per token
        last_token = lease.token
        outcome = record.checkpoint_outcome
        if outcome is not None:
            assert outcome.leader_proof == lease.proof()  # LA-5: admitted under its own term
            assert outcome.epoch not in outcomes  # LA-13: one outcome per epoch
            outcomes[outcome.epoch] = outcome
    for epoch, answers in told.items():
        assert all(answer == outcomes[epoch] for answer in answers), f"epoch {epoch}"


@pytest.mark.parametrize("seed", range(12))
def test_authority_invariants_hold_under_random_store_faults(seed: int) -> None:
    asyncio.run(schedule(seed))
