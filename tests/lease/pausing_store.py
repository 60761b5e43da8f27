"""Test support for the leader authority: a store wrapper that pauses requests on one path, and
small builders shared by the lease tests.

`PausingStore` (LA §9's "blocking store"): pause the next PUT or GET on an exact
key until the test releases it (several callers can be held at one gate), optionally report an
applied PUT as failed (an ambiguous write), and log every request as `(op, key)` so tests can
assert exact request counts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import msgspec

from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.errors import WriteOutcomeUnknown
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease import log
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.outcomes import Acquired, Held, LeaderLeaseObservation, LeaseOutcome
from laminar_cluster.lease.paths import HEAD_PATH, RECORDS_PREFIX, parse_record_path, record_path
from laminar_cluster.lease.records import (
    AuthorityRecoveryFaultSlot,
    LeaderAuthorityRecord,
    LeaderLease,
    LeaderLeaseOwner,
    RecoveryFaultPublisher,
)
from laminar_cluster.lease.validate import encode_pointer, encode_record
from laminar_cluster.store import (
    CREATE,
    OVERWRITE,
    GetResult,
    ObjectMeta,
    ObjectStore,
    PutMode,
    PutResult,
)


@dataclass
class Gate:
    """Holds up to `capacity` requests on one key until `release` is set."""

    capacity: int
    fail_after_apply: bool = False
    arrived: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # all `capacity` arrived
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_reached(self, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            await self.reached.wait()

    async def hold(self) -> None:
        self.arrived += 1
        if self.arrived >= self.capacity:
            self.reached.set()
        await self.release.wait()


class PausingStore(ObjectStore):
    """Wraps `inner`; gated requests wait at their gate, every request is logged."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.log: list[tuple[str, str]] = []
        self._put_gates: dict[str, Gate] = {}
        self._get_gates: dict[str, Gate] = {}

    @property
    def url(self) -> str:
        return self.inner.url

    def pause_put(self, key: str, *, count: int = 1, fail_after_apply: bool = False) -> Gate:
        """Hold the next `count` PUTs of `key`; with `fail_after_apply`, each applies and then
        raises WriteOutcomeUnknown (the response was lost)."""
        gate = Gate(capacity=count, fail_after_apply=fail_after_apply)
        self._put_gates[key] = gate
        return gate

    def pause_get(self, key: str, *, count: int = 1) -> Gate:
        """Hold the next `count` GETs of `key` (before they read anything)."""
        gate = Gate(capacity=count)
        self._get_gates[key] = gate
        return gate

    def count(self, op: str, key: str | None = None) -> int:
        return sum(
            1 for logged_op, logged_key in self.log if logged_op == op and key in (None, logged_key)
        )

    def reset_log(self) -> None:
        self.log.clear()

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        self.log.append(("get", key))
        gate = _take(self._get_gates, key)
        if gate is not None:
            await gate.hold()
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        self.log.append(("head", key))
        return await self.inner.head(key)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        self.log.append(("put", key))
        gate = _take(self._put_gates, key)
        if gate is not None:
            await gate.hold()
        result = await self.inner.put(key, body, mode)
        if gate is not None and gate.fail_after_apply:
            raise WriteOutcomeUnknown(f"{key}: put applied, response lost (scripted)", key=key)
        return result

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        self.log.append(("list", prefix))
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def delete(self, key: str) -> None:
        self.log.append(("delete", key))
        await self.inner.delete(key)

    async def close(self) -> None:
        await self.inner.close()


def _take(gates: dict[str, Gate], key: str) -> Gate | None:
    """The gate of `key` for one more request; removed once `capacity` requests took it."""
    gate = gates.get(key)
    if gate is None:
        return None
    if gate.arrived + 1 >= gate.capacity:
        del gates[key]
    return gate


# Builders shared by the lease tests.

TTL_S = 5.0


def boot(n: int) -> str:
    """A canonical non-nil v4-shaped UUID numbered `n`."""
    return f"00000000-0000-4000-8000-{n:012d}"


def owner(node: int, boot_n: int | None = None, term: int = 1) -> LeaderLeaseOwner:
    boot_id = boot(node if boot_n is None else boot_n)
    return LeaderLeaseOwner(node=node, boot=boot_id, process_term=term)


A = owner(1)
B = owner(2)


def lease_of(seq: int, renewal: int, token: int, who: LeaderLeaseOwner = A) -> LeaderLease:
    return LeaderLease(
        seq=seq,
        renewal_sequence=renewal,
        token=token,
        owner=who,
        expires_at_ms=1_000,
        catalog_manifest=None,
    )


def record_at(seq: int, *, renewal: int | None = None, token: int = 1) -> LeaderAuthorityRecord:
    """A standalone valid record for sequence `seq` (renewal defaults to seq)."""
    return LeaderAuthorityRecord.initial(lease_of(seq, seq if renewal is None else renewal, token))


def counters(lease: LeaderLease | None) -> tuple[int, int, int]:
    """(seq, renewal_sequence, token) as the spec's scenarios write them."""
    assert lease is not None
    return (lease.seq, lease.renewal_sequence, lease.token)


def authority(
    store: ObjectStore, seed: int, *, ttl_s: float = TTL_S, wall_start_ms: int = 1_700_000_000_000
) -> LeaderLeaseStore:
    """One process's facade, on its own SimulatedClock (distinct seeds: distinct nonces)."""
    clock = SimulatedClock(seed=seed, wall_start_ms=wall_start_ms)
    return LeaderLeaseStore(store, clock=clock, ttl_s=ttl_s)


def sim(leader: LeaderLeaseStore) -> SimulatedClock:
    assert isinstance(leader.clock, SimulatedClock)
    return leader.clock


def far_deadline(clock: Clock, seconds: float = 60.0) -> float:
    return clock.monotonic() + seconds


def acquired(outcome: LeaseOutcome) -> LeaderLease:
    assert isinstance(outcome, Acquired), outcome
    return outcome.lease


def held(outcome: LeaseOutcome) -> LeaderLease:
    assert isinstance(outcome, Held), outcome
    return outcome.lease


async def begin(leader: LeaderLeaseStore, who: LeaderLeaseOwner = A) -> LeaseOutcome:
    return await leader.begin_new_term(who, deadline=far_deadline(leader.clock))


async def renew(leader: LeaderLeaseStore, token: int, who: LeaderLeaseOwner = A) -> LeaseOutcome:
    return await leader.renew_exact(who, token, deadline=far_deadline(leader.clock))


async def takeover(
    leader: LeaderLeaseStore, observation: LeaderLeaseObservation, who: LeaderLeaseOwner = B
) -> LeaseOutcome:
    return await leader.try_takeover(who, observation, deadline=far_deadline(leader.clock))


async def put_record(store: ObjectStore, record: LeaderAuthorityRecord) -> None:
    await store.put(record_path(record.lease.seq), encode_record(record), CREATE)


async def set_pointer(store: ObjectStore, seq: int, seed: int = 99) -> None:
    pointer = log.new_pointer(SimulatedClock(seed=seed), seq)
    await store.put(HEAD_PATH, encode_pointer(pointer), OVERWRITE)


async def pointer_seq(store: ObjectStore) -> int | None:
    pointer = await log.read_pointer(store)
    return None if pointer is None else pointer.sequence


async def record_seqs(store: ObjectStore) -> list[int]:
    return [parse_record_path(meta.key) for meta in await store.list(RECORDS_PREFIX)]


def fault_record(head: LeaderAuthorityRecord, reporter_node: int) -> LeaderAuthorityRecord:
    """A recovery-fault admission after `head` (a non-liveness append, LA §3.3): seq+1, renewal,
    token, owner and expiry unchanged; the slot's fault_sequence and the revision = seq+1."""
    seq = head.lease.seq + 1
    participant = FenceParticipant(node_id=reporter_node, boot_incarnation=boot(reporter_node))
    slot = AuthorityRecoveryFaultSlot(
        publisher=RecoveryFaultPublisher(participant=participant, process_term=1),
        request_sequence=1,
        fault_sequence=seq,
        active=True,
    )
    others = (s for s in head.recovery_fault_slots if s.publisher.participant != participant)
    slots = sorted((*others, slot), key=lambda s: s.publisher.participant.node_id)
    lease = msgspec.structs.replace(head.lease, seq=seq)
    return msgspec.structs.replace(
        head.preserve_with_lease(lease),
        recovery_fault_revision=seq,
        recovery_fault_slots=tuple(slots),
    )
