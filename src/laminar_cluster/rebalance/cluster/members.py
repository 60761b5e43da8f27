"""`VersionedMembers`: the controller's versioned member list (RB §4.2, RB §6.3).

The version starts at 0 (nothing observed) and moves by one each time a published view's
signature (node, observed state, process term) differs from the last one, so the rebalance loop
wakes on real membership changes only, never on a renewal that changed nothing a peer sees.
`changed(since)` returns at once when the version already passed `since`, so a change that
arrived while the caller was busy is never lost.
"""

from __future__ import annotations

import asyncio

from laminar_cluster.errors import Refused
from laminar_cluster.membership.discovery import MembershipView
from laminar_cluster.rebalance.interfaces import NodeInfo
from laminar_cluster.rebalance.refusals import Refusal


def node_infos(view: MembershipView) -> tuple[NodeInfo, ...]:
    """NodeInfo per member, by node id; the state is the discovery `ObservedState` value."""
    return tuple(
        NodeInfo(
            node_id=member.node,
            state=member.state.value,
            failure_domain=member.record.failure_domain,
        )
        for member in view.members
    )


class VersionedMembers:
    """Implements `MembersWatch`; `publish` is called by the controller after each poll."""

    def __init__(self) -> None:
        self._version = 0
        self._members: tuple[NodeInfo, ...] = ()
        self._signature: tuple[tuple[int, str, int], ...] | None = None
        self._closed = False
        self._event = asyncio.Event()

    def version(self) -> int:
        return self._version

    def current(self) -> tuple[NodeInfo, ...]:
        return self._members

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, view: MembershipView) -> bool:
        """Install `view`; True when its signature changed (and the version moved)."""
        if self._closed:
            raise _closed()
        signature = view.signature()
        self._members = node_infos(view)
        if signature == self._signature:
            return False
        self._signature = signature
        self._version += 1
        self._wake()
        return True

    def close(self) -> None:
        """Wake every waiter; `changed` raises from now on."""
        self._closed = True
        self._wake()

    async def changed(self, since: int) -> int:
        """The first version > `since`; Refused (MEMBERS_WATCH_CLOSED) once closed."""
        while True:
            if self._version > since:
                return self._version
            if self._closed:
                raise _closed()
            event = self._event
            await event.wait()

    def _wake(self) -> None:
        self._event.set()
        self._event = asyncio.Event()


def _closed() -> Refused:
    """Nothing will change any more: the membership poll that published into it ended."""
    return Refused("members watch is closed", reason=Refusal.MEMBERS_WATCH_CLOSED)
