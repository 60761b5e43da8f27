"""`DataPlane`: what an embedded engine implements (docs/embedding.md), and the cut it returns.

The control plane runs every engine through `BaseEngine` (base.py), which keeps the rules of
RB §6.2 for all of them: gates, locks, activation revisions, shuffle state, adoption rules and
source-drain receipts. Given a data plane, it also runs a `VnodeHost` (vnode_host.py), which
decides which vnodes run, restores them from committed checkpoints, pauses them for a source
drain and holds the cut of a checkpoint until its outcome is known. The data plane keeps only
its own state and sources, split per vnode, and is told what to do through these six methods,
and says through a seventh, `quiescent_since_cut`, whether a checkpoint would capture anything
new (an engine without it is never quiescent: `plane_quiescent`).

Every method but `run` is synchronous and must not block: the host calls them between awaits,
which is what makes each restore, drop, pause and cut atomic with respect to the control plane.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.errors import LaminarError


@dataclass(frozen=True, slots=True)
class VnodeCut:
    """One vnode at a checkpoint cut. `state` None is the vnode's empty state (what
    `DataPlane.restore(vnode, None)` starts from): then no offset may be above 0 and the
    participant writes no partial for it (DC-15)."""

    state: bytes | None
    offsets: Mapping[int, int]  # source partition -> next offset to read


@dataclass(frozen=True, slots=True)
class Cut:
    """A participant's cut: exactly the vnodes the fence gives this process, and its output."""

    vnodes: Mapping[int, VnodeCut]
    output: bytes  # sink records since the last committed checkpoint


class Intake(Protocol):
    """What the host gives `DataPlane.run`."""

    def open(self) -> bool:
        """Consume now? True while the source gate is open and the installed fence runs.
        Check it again right before applying each batch."""
        ...

    def executing(self) -> AbstractAsyncContextManager[None]:
        """Hold while a batch is read and applied: closing or suspending authority waits until
        no batch is in flight (the engine's rotation lock, taken shared; RB §4.1)."""
        ...

    async def changed(self, timeout_s: float) -> None:
        """Until the next change of intake or ownership, at most `timeout_s`."""
        ...

    def failed(self, error: LaminarError) -> None:
        """Report an expected failure (logged and counted in the host's progress)."""
        ...


class DataPlane(Protocol):
    """An engine's own vnode state and sources (see docs/embedding.md for the contract)."""

    def restore(self, vnode: int, cut: VnodeCut | None, *, vnode_count: int) -> None:
        """Run `vnode` (of `vnode_count`) from its committed cut: install its state and consume
        its sources from the cut's offsets; None: the empty state, every source at its start.
        Raise CorruptRecord for a cut it cannot take (the host retries later)."""
        ...

    def drop(self, vnode: int) -> None:
        """Forget `vnode`: its state, offsets and in-flight output; stop consuming it.
        Idempotent; a vnode that later runs again is restored first."""
        ...

    def pause(self, vnodes: frozenset[int]) -> None:
        """Consume none of `vnodes` (a source drain revokes them) and every other running one;
        paused vnodes are still cut. `pause(frozenset())` resumes them all."""
        ...

    def capture(self, vnodes: tuple[int, ...]) -> Callable[[], Cut]:
        """Freeze every one of `vnodes` (all running) at one batch boundary now and put its
        output since the last committed cut in flight; return the encoder of that frozen cut.
        The host runs the encoder in a worker thread while `run` goes on."""
        ...

    def resolve(self, vnodes: tuple[int, ...], committed: bool) -> None:
        """The cut's outcome: committed, its in-flight output is history; else it stays
        pending and the next capture emits it again, merged with what came after."""
        ...

    async def run(self, intake: Intake, shutdown: asyncio.Event) -> None:
        """Process until `shutdown` is set: consume the running, unpaused vnodes only while
        `intake.open()`. Return or raise only on shutdown or a bug."""
        ...

    def quiescent_since_cut(self) -> bool:
        """True only when no vnode's state, offsets or output changed since the last cut
        `capture` returned (nothing restored, dropped or processed since, and that cut not
        resolved as aborted) AND every source of a running, unpaused vnode is caught up as far
        as the plane knows without a request. False when unsure: False is always safe (the
        leader then checkpoints as if this method did not exist; DC-21)."""
        ...


def plane_quiescent(plane: object) -> bool:
    """`plane.quiescent_since_cut()`, or False for a plane that does not implement it."""
    quiescent = getattr(plane, "quiescent_since_cut", None)
    return bool(quiescent()) if callable(quiescent) else False
