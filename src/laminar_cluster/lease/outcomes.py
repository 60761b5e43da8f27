"""Result types of the leader authority's operations (LA §3.11).

Expected race results are values, not errors (STYLE.md): `Acquired | Held` for lease
operations, `Created | ExistingIdentical | Contended` for appends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from laminar_cluster.lease.records import AuthorityHeadPointer, LeaderAuthorityRecord, LeaderLease


@dataclass(frozen=True)
class Acquired:
    """The caller's exact incarnation owns the returned lease record."""

    lease: LeaderLease


@dataclass(frozen=True)
class Held:
    """A rival owns the authority; `lease` is the rival's current lease."""

    lease: LeaderLease


LeaseOutcome = Acquired | Held


@dataclass(frozen=True)
class AppendCreated:
    """Our create of the candidate record succeeded and the pointer names it (or its successor
    was not yet published). `published` is the new head with the pointer token we wrote, when
    the store returned one (a hint for the next append; not part of equality)."""

    published: PublishedHead | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AppendExistingIdentical:
    """The byte-identical candidate was already durable (an ambiguous retry, or another caller
    appended the same thing). Reported as Unchanged by decision callers, never as Created."""

    published: PublishedHead | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AppendContended:
    """Another record holds the target sequence, or the head moved past it. Our own record may
    still be durable in the chain: callers re-derive their answer from `winner`. `head` is the
    winner as published, with the pointer it was read through (so the next append can follow
    it without reading the head again; not part of equality)."""

    winner: LeaderAuthorityRecord
    head: PublishedHead | None = field(default=None, compare=False)


AppendOutcome = AppendCreated | AppendExistingIdentical | AppendContended


@dataclass(frozen=True)
class LeaderLeaseObservation:
    """A rival's lease as seen at `started_s` on the observer's monotonic clock."""

    lease: LeaderLease
    started_s: float


@dataclass(frozen=True, slots=True)
class VersionedPointer:
    """A head pointer as read, with the e_tag/version a following Update must name."""

    pointer: AuthorityHeadPointer
    e_tag: str | None
    version: str | None

    @property
    def sequence(self) -> int:
        return self.pointer.sequence


@dataclass(frozen=True, slots=True)
class PublishedHead:
    """The record the pointer names (after successor repair), with the pointer as read."""

    record: LeaderAuthorityRecord
    pointer: VersionedPointer
