"""`admission.admit`, the one admission loop of every decision kind (docs/protocols/
leader-authority.md "Admission", LA-5), with the real LeaderLeaseStore on memory://.

Each test drives `admit` with its own `decide`, which appends a recovery-fault record (any valid
non-liveness append would do) and records the heads it was asked about. A rival process of the
same owner (its own LeaderLeaseStore and clock on the same store) renews the lease from inside
`decide`, so the append right after it loses the race at exactly that point.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from laminar_cluster.authority.admission import (
    AGAIN,
    Answer,
    Append,
    Decide,
    Decision,
    RequireTerm,
    admit,
)
from laminar_cluster.errors import Contended, DeadlineExceeded, Fenced, StoreUnavailable
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import AUTHORITY_MUTATION_ATTEMPTS_MAX
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from tests.lease.pausing_store import (
    TTL_S,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    far_deadline,
    fault_record,
    record_seqs,
    renew,
    sim,
    takeover,
)

REPORTER = 7  # the node whose fault record `Script` appends


@dataclass
class Script:
    """A `decide` for tests: answers `answer` when set, else appends a fault record of
    REPORTER after the head; runs `before` first on the first `races` calls."""

    rival: LeaderLeaseStore | None = None
    token: int = 1
    races: int = 0
    answer: str | None = None
    check_term: bool = True
    seen: list[int] = field(default_factory=list)

    async def __call__(
        self, head: LeaderAuthorityRecord, require_term: RequireTerm
    ) -> Decision[str]:
        self.seen.append(head.lease.seq)
        if self.answer is not None:
            return Answer(self.answer)
        if self.check_term:
            require_term()
        if len(self.seen) <= self.races:
            assert self.rival is not None
            acquired(await renew(self.rival, self.token))  # wins head.seq + 1 before us
        return Append(fault_record(head, REPORTER), "created", "identical")


async def leader(store: ObjectStore) -> tuple[LeaderLeaseStore, LeaderProof]:
    auth = authority(store, 1)
    return auth, acquired(await begin(auth)).proof()


async def faulty_leader(
    inner: ObjectStore, kind: FaultKind
) -> tuple[LeaderLeaseStore, LeaderProof, FaultyStore]:
    """A leader elected on `inner`, then reading and writing through a FaultyStore whose next
    create of record 2 fails with `kind`."""
    auth, proof = await leader(inner)
    faulty = FaultyStore(inner, clock=auth.clock, seed=3, config=FaultConfig())
    faulty.fail_next(kind, op="put", key_prefix=record_path(2))
    return LeaderLeaseStore(faulty, clock=auth.clock, ttl_s=auth.ttl_s), proof, faulty


async def run(auth: LeaderLeaseStore, proof: LeaderProof | None, decide: Decide[str]) -> str:
    return await admit(
        auth, proof=proof, decide=decide, what="test admission", deadline=far_deadline(auth.clock)
    )


def test_admit_appends_at_head_plus_one_under_the_term() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        decide = Script()
        assert await run(auth, proof, decide) == "created"
        assert decide.seen == [1]
        assert await record_seqs(store) == [1, 2]
        durable = await read_record(store, 2)
        assert durable is not None and durable.recovery_fault_revision == 2
        assert durable.lease.token == 1  # LA-4: a decision never advances the token

    asyncio.run(main())


def test_la5_admit_fences_a_proof_of_an_older_term() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, old = await leader(store)
        acquired(await begin(auth))  # the same owner's new term: token 2
        with pytest.raises(Fenced, match=r"no longer names the durable leader term.*token 2"):
            await run(auth, old, Script())
        # `decide` forgot to check the term: admit checks it before any write all the same.
        with pytest.raises(Fenced, match="does not name the durable authority term"):
            await run(auth, old, Script(check_term=False))
        assert await record_seqs(store) == [1, 2]  # LA-5: nothing was admitted
        # What is already durable answers any term (a deposed term's retry learns it).
        assert await run(auth, old, Script(answer="durable")) == "durable"
        with pytest.raises(Fenced, match="no durable leader authority head"):
            await run(authority(open_store("memory://"), 2), old, Script())

    asyncio.run(main())


def test_admit_re_derives_from_each_winner_until_it_appends() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        decide = Script(rival=authority(store, 2), races=2)
        assert await run(auth, proof, decide) == "created"
        assert decide.seen == [1, 2, 3]  # the first head, then each winner (a renewal)
        assert await record_seqs(store) == [1, 2, 3, 4]
        ours = await read_record(store, 4)
        assert ours is not None and ours.recovery_fault_revision == 4

    asyncio.run(main())


def test_admit_answers_from_the_winner_when_its_own_record_is_durable_behind_it() -> None:
    async def main() -> None:
        store = PausingStore(open_store("memory://"))
        auth, proof = await leader(store)
        rival = authority(store, 2)
        first = await auth.load_record()
        assert first is not None
        ours = fault_record(first, REPORTER)
        seen: list[tuple[int, bool]] = []

        async def decide(head: LeaderAuthorityRecord, require_term: RequireTerm) -> Decision[str]:
            seen.append((head.lease.seq, require_term.raced))
            if await read_record(store, 2) == ours:
                return Answer("durable behind the winner")
            require_term()
            return Append(ours, "created", "identical")

        gate = store.pause_put(HEAD_PATH)  # our pointer update, after our record landed
        async with asyncio.TaskGroup() as group:
            task = group.create_task(run(auth, proof, decide))
            await gate.wait_reached()
            acquired(await renew(rival, proof.fencing_token))  # repairs to 2, appends 3
            gate.release.set()
        assert task.result() == "durable behind the winner"
        assert seen == [(1, False), (3, True)]  # re-derived from the winner that published past us
        assert await record_seqs(store) == [1, 2, 3]

    asyncio.run(main())


def test_admit_raises_contended_when_the_race_is_never_won() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        decide = Script(rival=authority(store, 2), races=AUTHORITY_MUTATION_ATTEMPTS_MAX)
        with pytest.raises(
            Contended, match=f"did not converge in {AUTHORITY_MUTATION_ATTEMPTS_MAX}"
        ):
            await run(auth, proof, decide)
        assert len(decide.seen) == AUTHORITY_MUTATION_ATTEMPTS_MAX  # the bound, exactly
        head = await auth.load_record()
        assert head is not None and head.lease.seq == AUTHORITY_MUTATION_ATTEMPTS_MAX + 1
        assert head.recovery_fault_revision == 0  # every one of our appends lost

    asyncio.run(main())


def test_admit_stops_at_the_callers_deadline() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        clock = sim(auth)

        class Slow(Script):
            async def __call__(
                self, head: LeaderAuthorityRecord, require_term: RequireTerm
            ) -> Decision[str]:
                clock.advance(1.0)  # each attempt takes a second of the caller's budget
                return await super().__call__(head, require_term)

        decide = Slow(rival=authority(store, 2), races=AUTHORITY_MUTATION_ATTEMPTS_MAX)
        deadline = clock.monotonic() + 3.5
        with pytest.raises(DeadlineExceeded, match="test admission: deadline passed"):
            await admit(auth, proof=proof, decide=decide, what="test admission", deadline=deadline)
        assert len(decide.seen) == 4  # the fourth second passed the deadline
        with pytest.raises(DeadlineExceeded, match="before the operation started"):
            await admit(auth, proof=proof, decide=Script(), what="test admission", deadline=0)
        head = await auth.load_record()
        assert head is not None and head.recovery_fault_revision == 0  # nothing of ours landed

    asyncio.run(main())


@pytest.mark.parametrize("kind", [FaultKind.AFTER, FaultKind.AFTER_AS_CONFLICT])
def test_admit_reports_an_ambiguous_create_that_landed_as_identical(kind: FaultKind) -> None:
    async def main() -> None:
        inner = open_store("memory://")
        auth, proof, faulty = await faulty_leader(inner, kind)
        assert await run(auth, proof, Script()) == "identical"  # never "created"
        assert faulty.stats.injected[kind] == 1
        assert await record_seqs(inner) == [1, 2]

    asyncio.run(main())


def test_admit_passes_a_failed_create_through_and_a_retry_admits() -> None:
    async def main() -> None:
        inner = open_store("memory://")
        auth, proof, _ = await faulty_leader(inner, FaultKind.BEFORE)
        with pytest.raises(StoreUnavailable, match="no record was durable"):
            await run(auth, proof, Script())
        assert await record_seqs(inner) == [1]
        assert await run(auth, proof, Script()) == "created"  # the caller's retry
        assert await record_seqs(inner) == [1, 2]

    asyncio.run(main())


def test_admit_rechecks_an_answer_that_must_hold_across_remote_work() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        rival = authority(store, 2)
        seen: list[int] = []

        async def decide(head: LeaderAuthorityRecord, _: RequireTerm) -> Decision[int]:
            seen.append(head.lease.seq)
            if len(seen) == 1:
                acquired(await renew(rival, proof.fencing_token))  # moves during the work
            return Answer(head.lease.seq, still=lambda again: again.lease.seq == head.lease.seq)

        assert await admit(auth, proof=None, decide=decide, what="read", deadline=1e9) == 2
        assert seen == [1, 2]

    asyncio.run(main())


def test_admit_decides_again_after_a_preparing_append() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, proof = await leader(store)
        landed: list[int] = []

        async def decide(head: LeaderAuthorityRecord, _: RequireTerm) -> Decision[str]:
            if head.recovery_fault_revision:
                return Answer(f"decided on {head.lease.seq}")
            return Append(fault_record(head, REPORTER), AGAIN, AGAIN, lambda: landed.append(1))

        result = await admit(auth, proof=proof, decide=decide, what="t", deadline=1e9)
        assert result == "decided on 2" and landed == [1]

    asyncio.run(main())


def test_admit_without_a_proof_appends_under_whatever_term_is_current() -> None:
    async def main() -> None:
        store = open_store("memory://")
        auth, _ = await leader(store)
        rival = authority(store, 2)
        lease = await auth.load()
        assert lease is not None
        observation = rival.observe_rival(B, lease)
        sim(rival).advance(TTL_S + 0.01)
        acquired(await takeover(rival, observation))  # B's term 2 at sequence 2
        assert await run(auth, None, Script()) == "created"  # a recovery fault needs no proof
        durable = await read_record(store, 3)
        assert durable is not None and durable.lease.owner == B and durable.lease.token == 2

    asyncio.run(main())
