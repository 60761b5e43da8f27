"""Each create-only authority record costs one GET per process (LA §4.1.1, LA §4.4.3;
LA "Cost"): a follower that reads the outcome history after every checkpoint (the inventory,
a settlement, the recovery cut) reads each record it needs once, however long the history
grows, and each read of an unchanged head is the pointer (a conditional GET) and the LA-3
successor probe. The old cost was every live record of the chain on every changed head."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_attempt_settlement,
    cluster_outcomes,
    highest_cluster_committed_outcome,
)
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX
from laminar_cluster.store import GetResult, ObjectStore
from laminar_cluster.store.counting import CountingStore
from tests.authority.test_cluster_outcome_helpers import elect, open_leader, record

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
CHECKPOINTS = 40


class BodyCounting(CountingStore):
    """Counts, per key, the GETs that returned a body (a found object)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.bodies: Counter[str] = Counter()

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        result = await super().get(key, end=end)
        self.bodies[key] += 1
        return result


@LOCAL
def test_each_record_is_read_once_per_process(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        shared = make_store()
        leader = open_leader(shared, 1)
        proof = await elect(leader)
        reads = BodyCounting(shared)
        follower = open_leader(reads, 2)
        per_checkpoint: list[int] = []
        for epoch in range(1, CHECKPOINTS + 1):
            await record(leader, proof, epoch, commit=epoch % 4 == 0)
            before = reads.total
            outcomes = await cluster_outcomes(follower)
            assert outcomes[-1].epoch == epoch
            attempt = CheckpointAttempt.canonical(epoch)
            settled = await cluster_attempt_settlement(follower, attempt)
            assert settled is not None and settled.epoch == epoch
            await highest_cluster_committed_outcome(follower)
            per_checkpoint.append(reads.total - before)
        records = {key: n for key, n in reads.bodies.items() if key.startswith(RECORDS_PREFIX)}
        assert records and max(records.values()) == 1, records  # every record read once
        # Each of the three reads: the pointer (a conditional GET) and the successor probe;
        # plus the one new record. The same for the 40th checkpoint as for the 2nd: before,
        # every changed head re-read the whole live chain (the cost grew with the history).
        assert per_checkpoint[1:] == [3 * 2 + 1] * (CHECKPOINTS - 1), per_checkpoint
        assert reads.requests["get"] == reads.total  # no LIST, no HEAD
        assert reads.bodies[HEAD_PATH] == 1  # a plain GET once, then conditional reads

    asyncio.run(main())
