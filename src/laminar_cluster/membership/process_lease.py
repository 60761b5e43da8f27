"""The per-node process lease (ML §1.3, ML §2.11, ML §8.2, ML §4.3.4,
ML §4.9.2; docs/protocols/membership.md).

* `acquire`: every start takes the stored term + 1 and seq + 1 by compare-and-swap on the
  node's one record, immediately (ML-1, ML-2). The previous incarnation, if any, is named in a
  `ProcessLeaseFence` (ML §8.2: an immediate takeover, seq + 1 and term + 1), which the new record
  also keeps, newest first, in its `takeovers` (ML-11); renewals carry them unchanged.
* `renew`: update-if-match on our own last version with a fresh nonce; the local validity is
  anchored at the start of the attempt (ML-3). A CAS lost to any other incarnation means a newer
  start owns the node id: `ProcessFenced`, terminal (ML-2). A missed local deadline is terminal
  too, because peers may already count us dead (ML-5).
* States move forward only (ML-6); after `left` the lease is released and never renewed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NoReturn

from msgspec.structs import replace

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    LaminarError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.term import ttl_ms_of
from laminar_cluster.membership.paths import node_lease_path
from laminar_cluster.membership.records import (
    MAX_NODE_LEASE_RECORD_BYTES,
    NODE_LEASE_RECORD_VERSION,
    STATE_ORDER,
    NodeLeaseRecord,
    NodeReport,
    NodeState,
    decode_node_record,
    encode_node_record,
    with_takeover,
)
from laminar_cluster.membership.roster import RosterJoin, join_roster
from laminar_cluster.store import CREATE, IfMatch, ObjectStore

PROCESS_LEASE_ATTEMPTS_MAX: Final = 8


class ProcessFenced(Fenced):
    """This incarnation no longer owns its node id: stop the process, never retry."""

    def __init__(self, message: str, *, successor: ProcessLease | None) -> None:
        super().__init__(message)
        self.successor = successor


@dataclass(frozen=True, slots=True)
class Stored:
    """A record as read, with the token naming exactly that version."""

    record: NodeLeaseRecord
    token: IfMatch
    last_modified_ms: int = 0  # the store's time of that version (diagnostics: views' ages)


@dataclass(frozen=True, slots=True)
class AcquiredLease:
    """The result of a start: our record, and the incarnation we superseded (if any)."""

    record: NodeLeaseRecord
    predecessor: NodeLeaseRecord | None

    @property
    def fence(self) -> ProcessLeaseFence | None:
        """ML §8.2 evidence that the predecessor's exact term was taken over (seq+1, term+1)."""
        if self.predecessor is None:
            return None
        return ProcessLeaseFence(predecessor=self.predecessor.lease, successor=self.record.lease)


async def read_node_record(store: ObjectStore, node: int) -> Stored | None:
    """The node's record, strictly decoded and validated, or None when absent."""
    key = node_lease_path(node)
    try:
        got = await store.get(key, end=MAX_NODE_LEASE_RECORD_BYTES + 1)
    except ObjectNotFound:
        return None
    record = decode_node_record(got.body, key=key, node=node)
    return Stored(record=record, token=got.meta.token, last_modified_ms=got.meta.last_modified_ms)


class ProcessLeaseHolder:
    """One process incarnation's lease on one node id."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        node: int,
        *,
        ttl_s: float,
        failure_domain: str | None = None,
        report: Callable[[], NodeReport | None] | None = None,
    ) -> None:
        """`report`, when given, is called for each start and renewal: what the record
        carries for operators (records.NodeReport)."""
        self._store = store
        self._report = report
        self._clock = clock
        self.node = node
        self.key = node_lease_path(node)
        self.ttl_ms = ttl_ms_of(ttl_s)
        self._failure_domain = failure_domain
        self._held: Stored | None = None
        self._valid_until_s: float | None = None
        self._released = False
        # A renewal whose call failed after its write may have applied (lost response, read
        # back failed): the next renewal adopts it if it is what the store holds.
        self._unconfirmed: NodeLeaseRecord | None = None
        self._lock = asyncio.Lock()  # one renewal at a time: our own CAS never races itself
        # Every boot an `acquire` call of this holder used, written or not (a start that applied
        # unseen still names one of them): how a fenced process recognizes its own records.
        self.boots: list[str] = []

    @property
    def record(self) -> NodeLeaseRecord:
        if self._held is None:
            raise InvalidArgument(f"{self.key}: the process lease is not acquired")
        return self._held.record

    @property
    def valid_until_s(self) -> float | None:
        return self._valid_until_s

    @property
    def released(self) -> bool:
        """True once `left` was written: the lease is never renewed again."""
        return self._released

    def is_live(self) -> bool:
        """ML-3: live only until attempt start + ttl of the last successful write."""
        valid = self._valid_until_s
        return not self._released and valid is not None and self._clock.monotonic() < valid

    async def acquire(self, *, deadline: float) -> AcquiredLease:
        """Start a new incarnation: term and seq one past the stored record (ML-1, ML-2)."""
        if self._held is not None:
            raise InvalidArgument(f"{self.key}: this holder already acquired its lease")
        boot = str(self._clock.uuid4())
        self.boots.append(boot)
        async with within_deadline(self._clock, deadline, f"{self.key}: acquire"):
            for attempt in range(PROCESS_LEASE_ATTEMPTS_MAX):
                if attempt:
                    await self._clock.sleep(0)  # as lease/term.py: bounded by the count
                started_s = self._clock.monotonic()
                try:
                    current = await read_node_record(self._store, self.node)
                except StoreUnavailable:
                    continue
                candidate = self._start_record(current, boot)
                written = await self._write_start(current, candidate)
                if written is not None:
                    self._held = written
                    self._valid_until_s = started_s + self.ttl_ms / 1000
                    return AcquiredLease(
                        record=candidate, predecessor=None if current is None else current.record
                    )
        raise StoreUnavailable(
            f"{self.key}: acquire did not converge in {PROCESS_LEASE_ATTEMPTS_MAX} attempts"
        )

    async def join_roster(self, *, deadline: float) -> RosterJoin:
        """ML-14: this node's id in the roster (before it activates; `leave.activate`)."""
        self._require_held()
        return await join_roster(self._store, self._clock, self.node, deadline=deadline)

    async def renew(self, *, deadline: float, state: NodeState | None = None) -> NodeLeaseRecord:
        """One renewal (optionally announcing `state`); ProcessFenced when superseded."""
        async with self._lock:
            held = self._require_held()
            started_s = self._clock.monotonic()
            valid_until_s = self._valid_until_s
            if valid_until_s is None:
                self._lost("was already fenced")
            if started_s >= valid_until_s:
                self._lost(f"missed its renewal deadline by {started_s - valid_until_s:.3f} s")
            held = await self._settle_unconfirmed(held, min(deadline, valid_until_s))
            new_state = held.record.state if state is None else state
            # ML-6: a state never moves backwards within one term.
            if STATE_ORDER[new_state] < STATE_ORDER[held.record.state]:
                raise InvalidArgument(
                    f"{self.key}: state {held.record.state.value} cannot go to {new_state.value}"
                )
            lease = held.record.lease
            candidate = replace(
                held.record,
                lease=replace(lease, seq=lease.seq + 1, expires_at_ms=self._expiry_ms()),
                state=new_state,
                nonce=str(self._clock.uuid4()),
                report=self._current_report(),
            )
            op_deadline = min(deadline, valid_until_s)
            try:
                written = await self._renew_loop(held, candidate, op_deadline)
            except (StoreUnavailable, DeadlineExceeded):
                self._unconfirmed = candidate
                raise
            if self._clock.monotonic() >= valid_until_s:
                self._lost("renewal answered after the local lease deadline")  # ML-3
            self._held = written
            self._valid_until_s = started_s + self.ttl_ms / 1000  # ML-3: anchored at the start
            if new_state is NodeState.LEFT:
                self._released = True
            return candidate

    async def _settle_unconfirmed(self, held: Stored, deadline: float) -> Stored:
        """Before a renewal after a failed one: adopt the failed one's record if it applied
        (its nonce makes it ours alone; validity stays anchored at the last confirmed write).
        StoreUnavailable when the read fails (nothing was written by this call)."""
        unconfirmed = self._unconfirmed
        if unconfirmed is None:
            return held
        async with within_deadline(self._clock, deadline, f"{self.key}: read back"):
            current = await read_node_record(self._store, self.node)
        self._unconfirmed = None
        if current is not None and current.record == unconfirmed:
            self._held = current
            return current
        return held  # it did not apply, or someone else wrote: the CAS decides (ML-2)

    async def _renew_loop(
        self, held: Stored, candidate: NodeLeaseRecord, op_deadline: float
    ) -> Stored:
        body = encode_node_record(candidate, key=self.key, node=self.node)
        try:
            async with within_deadline(self._clock, op_deadline, f"{self.key}: renew"):
                for _ in range(PROCESS_LEASE_ATTEMPTS_MAX):
                    outcome = await self._renew_once(held, candidate, body)
                    if isinstance(outcome, Stored):
                        return outcome
                    held = Stored(record=held.record, token=outcome)  # unchanged: retry
        except Fenced:
            raise
        except LaminarError as error:
            if self._clock.monotonic() >= op_deadline:
                self._lost(f"renewal did not finish before the local lease deadline: {error}")
            raise
        raise StoreUnavailable(
            f"{self.key}: renewal did not converge in {PROCESS_LEASE_ATTEMPTS_MAX} attempts"
        )

    async def _renew_once(
        self, held: Stored, candidate: NodeLeaseRecord, body: bytes
    ) -> Stored | IfMatch:
        """One CAS: our written record, or the token to retry on when nothing changed. Any
        other incarnation's record means this one is fenced (ML-2)."""
        try:
            result = await self._store.put(self.key, body, held.token)
        except (PreconditionFailed, ObjectNotFound, WriteOutcomeUnknown, StoreUnavailable):
            return await self._read_back(held, candidate)
        if result.e_tag is None and result.version is None:
            return await self._read_back(held, candidate)
        return Stored(record=candidate, token=IfMatch(e_tag=result.e_tag, version=result.version))

    async def _read_back(self, held: Stored, candidate: NodeLeaseRecord) -> Stored | IfMatch:
        try:
            current = await read_node_record(self._store, self.node)
        except StoreUnavailable:
            return held.token
        if current is None:
            self._lost("its lease record disappeared", None)
        if current.record == candidate:
            return current  # ML-2: the write applied; the nonce makes it ours alone
        if current.record == held.record:
            return current.token  # the write did not apply: retry on the version read
        mine = current.record.lease.owner == held.record.lease.owner
        if mine and current.record.lease.term == held.record.lease.term:
            raise CorruptRecord(f"{self.key}: our own term changed under us", key=self.key)
        self._lost("was superseded", current.record.lease)

    def _lost(self, why: str, successor: ProcessLease | None = None) -> NoReturn:
        self._valid_until_s = None
        lease = self._held.record.lease if self._held is not None else None
        term = "?" if lease is None else lease.term
        message = f"node {self.node}: process term {term} {why}"
        if successor is not None:
            message += f" by term {successor.term} (boot {successor.owner})"
        raise ProcessFenced(message, successor=successor)

    def _require_held(self) -> Stored:
        if self._held is None:
            raise InvalidArgument(f"{self.key}: the process lease is not acquired")
        if self._released:
            raise InvalidArgument(f"{self.key}: the process lease was released (state left)")
        return self._held

    def _start_record(self, current: Stored | None, boot: str) -> NodeLeaseRecord:
        """ML-1: term + 1 and seq + 1 over `current`; ML-11: our takeover of it, newest first."""
        previous = None if current is None else current.record
        term, seq = (0, 0) if previous is None else (previous.lease.term, previous.lease.seq)
        lease = ProcessLease(
            node=self.node, owner=boot, term=term + 1, seq=seq + 1, expires_at_ms=self._expiry_ms()
        )
        takeovers = (
            ()
            if previous is None
            else with_takeover(
                ProcessLeaseFence(predecessor=previous.lease, successor=lease), previous.takeovers
            )
        )
        return NodeLeaseRecord(
            version=NODE_LEASE_RECORD_VERSION,
            lease=lease,
            state=NodeState.JOINING,
            ttl_ms=self.ttl_ms,
            nonce=str(self._clock.uuid4()),
            failure_domain=self._failure_domain,
            takeovers=takeovers,
            report=self._current_report(),
        )

    def _current_report(self) -> NodeReport | None:
        return None if self._report is None else self._report()

    async def _write_start(
        self, current: Stored | None, candidate: NodeLeaseRecord
    ) -> Stored | None:
        """CAS the start record; None when it did not apply (re-derive from a fresh read).
        Any doubt, a reported conflict included, is settled by reading back our nonce."""
        body = encode_node_record(candidate, key=self.key, node=self.node)
        mode = CREATE if current is None else current.token
        try:
            result = await self._store.put(self.key, body, mode)
        except (
            ObjectAlreadyExists,
            PreconditionFailed,
            ObjectNotFound,
            WriteOutcomeUnknown,
            StoreUnavailable,
        ):
            result = None
        if result is not None and (result.e_tag is not None or result.version is not None):
            return Stored(record=candidate, token=IfMatch(result.e_tag, result.version))
        try:
            now = await read_node_record(self._store, self.node)
        except StoreUnavailable:
            return None
        return now if now is not None and now.record == candidate else None

    def _expiry_ms(self) -> int:
        return self._clock.wall_ms() + self.ttl_ms  # diagnostic only, never decides (ML-5)
