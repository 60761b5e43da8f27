"""The one admission loop every leader decision kind goes through (LA §4.1.6, LA §11.1; LA-5).

Cluster outcomes and their compaction, the outcome and assignment-decision floors, assignment
decisions, recovery faults, the release commit and the catalog seal are all admitted the same
way, by `admit`:

1. Read the published head. None is Fenced: a decision needs an existing authority.
2. `decide(head, require_term)`, a function of that head only (and of durable records it names):
   it calls `require_term()`, which raises Fenced unless the head's lease matches the proof
   (LA-5), before anything only the proof's term may do; it answers what is already durable
   (`Answer`), or returns `Append(record)` for sequence head + 1, or raises Refused /
   InvalidArgument / CorruptRecord. Where the durable answer comes before the term check is
   each kind's, as the spec orders it: always for the seal and the release (LA §11.13), on a
   race winner (`require_term.raced`) for outcomes, decisions and the decision floor (LA §11.1),
   never for the outcome floor.
3. Append the record with a create at head + 1, checking the term first if `decide` did not:
   created -> `created`, already durable byte-identical -> `identical` (never reported as
   created). A lost create is re-read by the append itself (LA §4.1.6).
4. A lost race goes back to 2 with the winner as the head: the answer is re-derived from the
   winner, where our own record may already be (LA §11.1). A winner that did not advance the
   sequence is CorruptRecord (the store misbehaves).

Every attempt is bounded: at most AUTHORITY_MUTATION_ATTEMPTS_MAX heads and the caller's
absolute monotonic `deadline` (DeadlineExceeded). A contention that never converged is
Contended (re-read, re-derive); store failures pass through as they come (StoreUnavailable,
WriteOutcomeUnknown). Without a proof (recovery faults, reads that must hold across remote
work) nothing is term-checked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import msgspec

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import Contended, Fenced, InvalidArgument
from laminar_cluster.fencing import LeaderProof, proof_is_canonical
from laminar_cluster.lease.limits import AUTHORITY_MUTATION_ATTEMPTS_MAX
from laminar_cluster.lease.log import require_advanced
from laminar_cluster.lease.outcomes import AppendContended, AppendCreated, PublishedHead
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease
from laminar_cluster.lease.validate_chains import lease_matches_proof

if TYPE_CHECKING:
    from laminar_cluster.lease.lease_store import LeaderLeaseStore

R = TypeVar("R")


class Again:
    """An `Append` result that means: decide again on a freshly read head (a record that only
    prepares the decision, such as an outcome-history compaction floor, has landed)."""


AGAIN: Final = Again()


@dataclass(frozen=True, slots=True)
class Answer(Generic[R]):
    """Answer `value` without writing. With `still`, the answer must survive the remote work
    that produced it: the head is read again and `value` is answered only if `still(new head)`;
    otherwise the new head is decided again."""

    value: R
    still: Callable[[LeaderAuthorityRecord], bool] | None = None


@dataclass(frozen=True, slots=True)
class Append(Generic[R]):
    """Append `record` (sequence head + 1). `created` answers when this call created it,
    `identical` when the byte-identical record was already durable; AGAIN decides again.
    `landed` runs once the record is durable either way (a cache install)."""

    record: LeaderAuthorityRecord
    created: R | Again
    identical: R | Again
    landed: Callable[[], None] | None = None


Decision = Answer[R] | Append[R]


class RequireTerm:
    """The term check of one head, handed to `decide`: calling it raises Fenced unless the
    head's lease matches the proof (LA-5; nothing without a proof). `raced` says the head is
    the winner of a race this admission just lost, where a kind re-derives its answer from the
    winner before the term check (LA §11.1); on a freshly read head most kinds check first."""

    __slots__ = ("_lease", "_proof", "_what", "checked", "raced")

    def __init__(
        self, lease: LeaderLease, proof: LeaderProof | None, what: str, *, raced: bool
    ) -> None:
        self._lease, self._proof, self._what = lease, proof, what
        self.raced = raced
        self.checked = False

    def __call__(self) -> None:
        if self._proof is not None:
            check_term(self._lease, self._proof, self._what, raced=self.raced)
        self.checked = True


Decide = Callable[[LeaderAuthorityRecord, RequireTerm], Awaitable[Decision[R]]]


@dataclass(frozen=True, slots=True)
class _Next:
    head: PublishedHead
    raced: bool  # the head is the winner of the race we just lost


@dataclass(frozen=True, slots=True)
class _Done(Generic[R]):
    value: R


async def admit(
    authority: LeaderLeaseStore,
    *,
    proof: LeaderProof | None,
    decide: Decide[R],
    what: str,
    deadline: float,
) -> R:
    """Admit what `decide` decides on the published head, under the exact term of `proof`
    (LA-5), until it is answered; see the module docstring for the steps and errors."""
    async with within_deadline(authority.clock, deadline, what):
        step = _Next(await published_head(authority, what), raced=False)
        for attempt in range(AUTHORITY_MUTATION_ATTEMPTS_MAX):
            if attempt:
                await authority.clock.sleep(0)  # cooperative yield: another append won
            result = await _attempt(authority, step, proof, decide, what)
            if isinstance(result, _Done):
                return result.value
            step = result
    raise Contended(
        f"{what} did not converge in {AUTHORITY_MUTATION_ATTEMPTS_MAX} attempts: other appends "
        "kept winning the next authority sequence"
    )


async def _attempt(
    authority: LeaderLeaseStore,
    step: _Next,
    proof: LeaderProof | None,
    decide: Decide[R],
    what: str,
) -> _Done[R] | _Next:
    """One head: decide, then answer or append; the next head when the loop must go on."""
    head = step.head
    require_term = RequireTerm(head.record.lease, proof, what, raced=step.raced)
    decision = await decide(head.record, require_term)
    if isinstance(decision, Answer):
        if decision.still is None:
            return _Done(decision.value)
        again = await published_head(authority, what)
        return _Done(decision.value) if decision.still(again.record) else _Next(again, False)
    if not require_term.checked:
        require_term()  # LA-5: no append without the term, whatever `decide` did
    outcome = await authority.append(head, decision.record)
    if isinstance(outcome, AppendContended):
        require_advanced(outcome.winner, head.record.lease.seq, what)
        winner = outcome.head or await published_head(authority, what)
        return _Next(winner, raced=True)
    if decision.landed is not None:
        decision.landed()
    result = decision.created if isinstance(outcome, AppendCreated) else decision.identical
    if isinstance(result, Again):
        return _Next(await published_head(authority, what), raced=False)
    return _Done(result)


async def published_head(authority: LeaderLeaseStore, what: str) -> PublishedHead:
    """The published head; Fenced when the namespace has none."""
    head = await authority.load_published_head()
    if head is None:
        raise Fenced(f"{what}: no durable leader authority head")
    return head


def check_term(lease: LeaderLease, proof: LeaderProof, what: str, *, raced: bool = False) -> None:
    """LA-5: only the exact term `proof` names may write after `lease`; Fenced otherwise.
    `raced`: the lease is the winner of a race the caller just lost."""
    if lease_matches_proof(lease, proof):
        return
    lost = "; a newer leader term won the next authority sequence" if raced else ""
    raise Fenced(
        f"{what} was fenced: the proof (token {proof.fencing_token}) no longer names the durable "
        f"leader term: it does not name the durable authority term (token {lease.token}){lost}"
    )


def require_canonical_proof(proof: LeaderProof, what: str) -> None:
    """A non-canonical proof names no term at all: Fenced before anything is read."""
    if not proof_is_canonical(proof):
        raise Fenced(f"{what} proof is not canonical")


def successor(head: LeaderAuthorityRecord, **changes: Any) -> LeaderAuthorityRecord:
    """The decision append after `head` (LA §3.3, LA §3.4): carried fields copied, admitting
    fields cleared, the lease copied with seq + 1 (renewal sequence, token, owner, expiry and
    catalog unchanged: LA-4, a decision never advances the token), then `changes` applied.
    InvalidArgument when the u64 sequence is exhausted."""
    seq = head.lease.seq
    if seq >= U64_MAX:
        raise InvalidArgument("leader authority sequence exhausted")
    record = head.preserve_with_lease(msgspec.structs.replace(head.lease, seq=seq + 1))
    return msgspec.structs.replace(record, **changes) if changes else record
