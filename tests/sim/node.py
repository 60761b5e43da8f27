"""One simulated process: a real `RebalanceNode` (rebalance/node/rebalance_node.py) for one boot of
one node.

`RebalanceNode` assembles the whole control plane of a process from the real modules: the
process lease (acquire, activate, `keep_renewed`), `Discovery` inside a
`StoreClusterController`, `LeaderLeaseManager`s back to back (every node is a candidate), the
`BaseEngine` with a `LeaderCheckpointer`, the `SnapshotWatcher`, the `RebalanceLoop`, the
leader duties (seed v1, periodic checkpoint, stopped-recovery rounds) and the graceful leave.
The simulation only injects three things:

* the store: this process's own seeded `FaultyStore` over the shared `SimStore`;
* the clock: the shared `SimClock`;
* the engine: `SimEngine`, a `BaseEngine` that records every registry move (checker 4).

A crash is the simulation cancelling `SimProcess.run()` at an arbitrary await; a lost process
lease ends the node with exit 3, like the real process.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.clock import Clock
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.membership import NodeState
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.rebalance_node import (
    EXIT_FENCED,
    EXIT_LEAVE_TIMEOUT,
    EXIT_LEFT,
    EXIT_STARTUP_FAILED,
    NodeConfig,
    RebalanceNode,
)
from laminar_cluster.store.faulty import FaultyStore
from tests.sim.scheduler import SimClock

# Node log events copied into the simulation trace (the rest is dropped).
TRACED_EVENTS: Final = frozenset(
    {
        "seeded",
        "rotated",
        "rebalance_failed",
        "leader",
        "leader_lost",
        "stopped_recovery",
        "checkpoint_failed",
        "draining",
        "left",
        "leave_timeout",
        "fenced",
        "crashed",
    }
)


class Exit(enum.Enum):
    RUNNING = "running"
    LEFT = "left"  # graceful leave completed (exit 0)
    FENCED = "fenced"  # lost its process lease (exit 3)
    LEAVE_TIMEOUT = "leave timeout"  # stopped without leaving (exit 4)
    ERROR = "error"  # run() raised a store error (a start that failed, or worse)
    CRASHED = "crashed"  # cancelled by the simulation
    STOPPED = "stopped"  # stopped at the end of the run


@dataclass(frozen=True)
class Jump:
    """A registry move that skipped versions (after the process's first adoption)."""

    at_s: float
    node_id: int
    boot: str
    before: int
    after: int


@dataclass
class Moves:
    """Registry moves of every engine, for checker 4."""

    jumps: list[Jump] = field(default_factory=list)
    adoptions: int = 0
    origin_s: float = 0.0  # the run's start on the clock


class SimEngine(BaseEngine):
    """A `BaseEngine` that records each registry move as it applies (checker 4: after its
    first adoption, a process's registry only moves v -> v+1)."""

    def __init__(
        self,
        *,
        clock: Clock,
        participant: FenceParticipant,
        checkpointer: Checkpointer,
        moves: Moves,
    ) -> None:
        super().__init__(clock=clock, participant=participant, checkpointer=checkpointer)
        self.moves = moves

    def _apply(self, snapshot: AssignmentSnapshot) -> None:
        before = self.registry().version
        after = snapshot.assignment_version
        self.moves.adoptions += 1
        if before != 0 and after != before + 1:
            me = self.participant
            at_s = self.clock.monotonic() - self.moves.origin_s
            self.moves.jumps.append(Jump(at_s, me.node_id, me.boot_incarnation, before, after))
        super()._apply(snapshot)


class _TraceStream:
    """The node's JSON-lines log: selected events go to the simulation trace."""

    def __init__(self, on_event: Callable[[str], None]) -> None:
        self._on_event = on_event

    def write(self, text: str) -> int:
        line = json.loads(text)
        event = line["event"]
        if event in TRACED_EVENTS:
            fields = {k: v for k, v in line.items() if k not in ("node", "event", "t_mono")}
            shown = " ".join(
                f"{k}={v}" for k, v in sorted(fields.items()) if k != "attempt_started"
            )
            self._on_event(f"node {line['node']} {event} {shown}".rstrip())
        return len(text)

    def flush(self) -> None:
        pass


def node_config(node_id: int, vnode_count: int) -> NodeConfig:
    """Short simulated timings: ttl 2 s (renewals every 0.5 s), poll 0.5 s."""
    return NodeConfig(
        node_id=node_id,
        ttl_s=2.0,
        poll_s=0.5,
        debounce_s=0.5,
        checkpoint_interval_s=2.0,
        retry_delay_s=0.5,
        drain_ack_timeout_s=2.0,
        checkpoint_timeout_s=3.0,
        leave_timeout_s=20.0,
        vnode_count=vnode_count,
        # Cheaper simulated runs: rival observation at the renewal pace (a lapsed leader is
        # still seen within 0.5 s of a 2 s lease) and log-event detection at half the poll:
        # each wake-up of every node is a simulation step (0.25/0.1 s took twice the steps
        # and ~8% more CPU a run, with no checker seeing more).
        monitor_interval_s=0.25,
        observe_interval_s=0.5,
    )


@dataclass
class SimProcess:
    """One boot of node `node_id`."""

    node_id: int
    store: FaultyStore
    clock: SimClock
    vnode_count: int
    moves: Moves
    on_event: Callable[[str], None]
    exit: Exit = Exit.RUNNING
    node: RebalanceNode | None = None

    def __post_init__(self) -> None:
        self.node = RebalanceNode(
            self.store,
            self.clock,
            node_config(self.node_id, self.vnode_count),
            NodeLog(_TraceStream(self.on_event), self.clock, self.node_id),  # type: ignore[arg-type]
            engine_factory=self._engine,
        )

    def _engine(
        self, clock: Clock, participant: FenceParticipant, checkpointer: Checkpointer
    ) -> BaseEngine:
        return SimEngine(
            clock=clock, participant=participant, checkpointer=checkpointer, moves=self.moves
        )

    @property
    def engine(self) -> BaseEngine | None:
        return None if self.node is None else self.node.engine

    @property
    def participant(self) -> FenceParticipant | None:
        holder = None if self.node is None else self.node.holder
        if holder is None:
            return None
        try:
            boot = holder.record.lease.owner
        except LaminarError:
            return None  # not acquired yet
        return FenceParticipant(node_id=self.node_id, boot_incarnation=boot)

    def active(self) -> bool:
        """Running, lease live and announced active (what checker 5 counts as assignable)."""
        holder = None if self.node is None else self.node.holder
        if self.exit is not Exit.RUNNING or holder is None or not holder.is_live():
            return False
        return holder.record.state is NodeState.ACTIVE

    def request_leave(self) -> bool:
        node = self.node
        if node is None or node.leave_requested.is_set():
            return False
        node.request_leave()
        return True

    async def run(self) -> None:
        assert self.node is not None
        try:
            code = await self.node.run()
        except asyncio.CancelledError:
            if self.exit is Exit.RUNNING:
                self.exit = Exit.CRASHED
            raise
        except LaminarError as error:
            self.exit = Exit.ERROR
            self.on_event(f"node {self.node_id} exited with {type(error).__name__}: {error}")
            return
        except BaseExceptionGroup as group:  # store errors only; anything else propagates
            _, rest = group.split(LaminarError)
            if rest is not None:
                raise
            self.exit = Exit.ERROR
            first = group.exceptions[0]
            self.on_event(f"node {self.node_id} exited with {type(first).__name__}: {first}")
            return
        self.exit = {
            EXIT_LEFT: Exit.LEFT,
            EXIT_FENCED: Exit.FENCED,
            EXIT_LEAVE_TIMEOUT: Exit.LEAVE_TIMEOUT,
            EXIT_STARTUP_FAILED: Exit.ERROR,
        }.get(code, Exit.STOPPED)
