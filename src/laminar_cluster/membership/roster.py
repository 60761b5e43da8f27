"""The membership roster `membership/roster.json` (ML-14; docs/protocols/membership.md): the
ids of the nodes that joined with a lease record, so discovery notices a join with one
conditional GET instead of listing `membership/nodes/` every poll (issue 15: a small pointer
object per prefix that changes).

A node that created or re-created its lease record adds its own id before it activates
(`join_roster`, called by `membership.leave.activate`): a read, then create (no roster yet) or
update-if-match on the version read; a lost race re-reads and merges, so racing joiners all end
up listed. Ids are only ever added: a node that left keeps its id (its record stays, and is the
start counter of its next start), and a record that is gone is simply not found by discovery.
The roster carries no nonce: it only grows, so a version read twice with one e_tag names the
same ids, and a write whose outcome is unknown is settled by the next read (our id is there or
it is not). A corrupt roster is reported and never overwritten (ML-10): the start goes on, and
discovery lists around it.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import (
    CorruptRecord,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.membership.paths import ROSTER_PATH
from laminar_cluster.membership.records import (
    MAX_ROSTER_RECORD_BYTES,
    ROSTER_RECORD_VERSION,
    MembershipRoster,
    decode_roster,
    encode_roster,
)
from laminar_cluster.store import CREATE, IfMatch, ObjectStore

logger = logging.getLogger(__name__)

ROSTER_JOIN_ATTEMPTS_MAX: Final = 16
ROSTER_BACKOFF_S_MIN: Final = 0.005
ROSTER_BACKOFF_S_MAX: Final = 0.25


class RosterJoin(enum.Enum):
    """How `join_roster` ended."""

    ALREADY_LISTED = "already_listed"  # one GET, nothing written
    ADDED = "added"  # our write applied (seen by its answer or by the next read)
    CORRUPT = "corrupt"  # the roster is not trusted and not overwritten (ML-10)


@dataclass(frozen=True, slots=True)
class StoredRoster:
    """A roster as read, with the token naming exactly that version."""

    roster: MembershipRoster
    token: IfMatch


async def read_roster(store: ObjectStore) -> StoredRoster | None:
    """The roster, strictly decoded and validated (CorruptRecord otherwise), or None."""
    try:
        got = await store.get(ROSTER_PATH, end=MAX_ROSTER_RECORD_BYTES + 1)
    except ObjectNotFound:
        return None
    return StoredRoster(decode_roster(got.body, key=ROSTER_PATH), got.meta.token)


def roster_with(current: MembershipRoster | None, node: int) -> MembershipRoster:
    """`current` (or an empty roster) with `node` merged in, ascending."""
    nodes = () if current is None else current.nodes
    return MembershipRoster(version=ROSTER_RECORD_VERSION, nodes=tuple(sorted({*nodes, node})))


async def join_roster(
    store: ObjectStore, clock: Clock, node: int, *, deadline: float
) -> RosterJoin:
    """ML-14: make sure `node` is in the roster. At most ROSTER_JOIN_ATTEMPTS_MAX rounds of a
    read and a conditional write, with full-jitter backoff between rounds, never past
    `deadline` (DeadlineExceeded); StoreUnavailable when the rounds run out."""
    backoff_s, wrote = ROSTER_BACKOFF_S_MIN, False
    async with within_deadline(clock, deadline, f"{ROSTER_PATH}: join node-{node}"):
        for attempt in range(ROSTER_JOIN_ATTEMPTS_MAX):
            if attempt:
                await clock.sleep(clock.random.uniform(0, backoff_s))  # full jitter
                backoff_s = min(2 * backoff_s, ROSTER_BACKOFF_S_MAX)
            try:
                current = await read_roster(store)
            except StoreUnavailable:
                continue
            except CorruptRecord as error:
                logger.warning("membership roster not trusted, left as it is: %s", error)
                return RosterJoin.CORRUPT
            if current is not None and node in current.roster.nodes:
                return RosterJoin.ADDED if wrote else RosterJoin.ALREADY_LISTED
            body = encode_roster(
                roster_with(None if current is None else current.roster, node), key=ROSTER_PATH
            )
            try:
                await store.put(ROSTER_PATH, body, CREATE if current is None else current.token)
            except (ObjectAlreadyExists, PreconditionFailed, ObjectNotFound):
                continue  # another joiner moved it: re-read and merge
            except (WriteOutcomeUnknown, StoreUnavailable):
                wrote = True  # may have applied: the next read tells
                continue
            return RosterJoin.ADDED
    raise StoreUnavailable(
        f"{ROSTER_PATH}: node-{node} not in the roster after {ROSTER_JOIN_ATTEMPTS_MAX} attempts"
    )
