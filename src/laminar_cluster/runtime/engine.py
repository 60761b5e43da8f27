"""`StreamEngine`: the reference engine, a `DataPlane` (rebalance/engine/data_plane.py;
docs/embedding.md) over a partitioned `SourceLog` and a `Processor` (issue 7; RB §6.2; DC,
DC-11, DC-12, DC-4, DC-10, DC-15; docs/protocols/distributed-checkpoint.md).

It implements the facade only: `BaseEngine` and its `VnodeHost` keep every control rule
(gates, activation, adoption, drain receipts and pauses, restores, held cuts), and tell this
engine which vnodes run, from which cut, which are paused, when to capture and how a cut ended.
`embed_plane` assembles an engine around any plane; its `EngineView` is what a node's
metrics and progress log read.

Processing (`run`, engine_loop.py): while intake is open it reads its running vnodes'
unpaused partitions round-robin and feeds the `Processor`. A batch is applied synchronously,
only if intake is still open and the partition still stands at the offset it was read from:
every gate, cut, drain and adoption falls on a batch boundary, and a read overtaken by one is
discarded (reads have no effects).

Cuts (exactly-once at depth 1, DC): `capture` freezes, at one batch boundary, every given
vnode's state and offsets plus its output since the last committed checkpoint
(`Processor.capture`); the host encodes it in a worker thread and holds it until the outcome.
Processing does not pause. Commit makes exactly the cut's output history (the processor's
baseline becomes the cut); Abort keeps it pending, so the next cut emits it again merged with
what came after, and no state rolls back in either case. A vnode restored empty and untouched
since is cut as the empty state without asking the processor (DC-15).

Quiescence (`quiescent_since_cut`, DC-21): the last capture's offsets and a count of restores
and drops are remembered; the plane is quiescent while neither moved, that cut was not resolved
as aborted (its output is pending again), and the log's published ends, as last polled (no
request), say no consumable partition has more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.data_plane import Cut, DataPlane, Intake, VnodeCut
from laminar_cluster.rebalance.engine.handoff_checkpoint import Checkpointer
from laminar_cluster.rebalance.engine.restores import Restorer
from laminar_cluster.rebalance.engine.vnode_host import VnodeHost
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.runtime.engine_loop import EngineLoop
from laminar_cluster.runtime.engine_types import (
    BatchReader,
    EngineConfig,
    EngineProgress,
    SourceLog,
    StreamCounters,
    engine_progress,
    read_columns,
)
from laminar_cluster.runtime.processor import Processor
from laminar_cluster.runtime.vnode_table import VnodeTable


class StreamEngine:
    """One process's reference data plane: sources, per-vnode processing and cuts."""

    def __init__(
        self,
        *,
        clock: Clock,
        log: SourceLog,
        processor: Processor,
        partitions: int | None = None,
        config: EngineConfig | None = None,
        read: BatchReader | None = None,
    ) -> None:
        """`read` gives the processor its batches (default: the reference log's columns)."""
        self.clock = clock
        self.log = log
        self.processor = processor
        self.config = config or EngineConfig()
        self.table = VnodeTable(partitions or 0)
        self.counters = StreamCounters()
        self._moves = 0  # restores and drops since start
        self._cut_mark: tuple[int, dict[int, int]] | None = None  # at the last capture
        self._loop = EngineLoop(
            clock=clock,
            log=log,
            read=read or read_columns(log),
            processor=processor,
            config=self.config,
            table=self.table,
            counters=self.counters,
            partitions_known=partitions is not None,
        )

    # -- DataPlane -----------------------------------------------------------------------------
    @property
    def partitions_known(self) -> bool:
        """Whether the log's partition count is known (declared by the producer, or given)."""
        return self._loop.partitions_known

    def restore(self, vnode: int, cut: VnodeCut | None, *, vnode_count: int) -> None:
        """Check the cut's offsets (CorruptRecord), then install its state and offsets."""
        state = None if cut is None else cut.state
        offsets = {} if cut is None else dict(cut.offsets)
        self.table.check_restore(vnode, offsets, vnode_count)
        self._moves += 1
        self.processor.restore(vnode, state)
        self.table.restore(vnode, offsets, empty=state is None, vnode_count=vnode_count)

    def drop(self, vnode: int) -> None:
        """Forget the vnode's offsets and its processor state."""
        self._moves += 1
        self.table.drop(vnode)
        self.processor.drop(vnode)

    def pause(self, vnodes: frozenset[int]) -> None:
        """Read none of `vnodes`' partitions until the next pause."""
        self.table.pause(vnodes)

    def capture(self, vnodes: tuple[int, ...]) -> Callable[[], Cut]:
        """Freeze `vnodes`' offsets and state now; the encoder reads only the frozen copies."""
        table = self.table
        offsets = table.cut_offsets(vnodes)
        self._cut_mark = (self._moves, dict(table.offsets))
        empty = frozenset(vnode for vnode in vnodes if vnode in table.untouched)  # DC-15
        encode = self.processor.capture(tuple(v for v in vnodes if v not in empty))

        def encoded_cut() -> Cut:
            encoded = encode()
            cuts = {
                vnode: VnodeCut(
                    state=None if vnode in empty else encoded.states[vnode], offsets=offsets[vnode]
                )
                for vnode in vnodes
            }
            return Cut(vnodes=cuts, output=encoded.output)

        return encoded_cut

    def resolve(self, vnodes: tuple[int, ...], committed: bool) -> None:
        """The processor's in-flight output of `vnodes` commits or stays pending."""
        if not committed:
            self._cut_mark = None  # the output is pending again: a cut would capture it
        for vnode in vnodes:
            if committed:
                self.processor.commit_output(vnode)
            else:
                self.processor.abort_output(vnode)

    async def run(self, intake: Intake, shutdown: asyncio.Event) -> None:
        """Process until `shutdown` is set (the host runs it beside its restores)."""
        await self._loop.run(intake, shutdown)

    def quiescent_since_cut(self) -> bool:
        """No restore, drop or batch since the last capture, which was not aborted, the
        processor has nothing due at a cut, and the published ends (as last polled) show
        nothing new for a consumable partition."""
        mark, table = self._cut_mark, self.table
        if mark is None or mark != (self._moves, table.offsets) or not self.processor.quiescent():
            return False
        return self.log.caught_up({p: table.offsets[p] for p in table.consumable()})

    def caught_up(self, vnode: int) -> bool:
        """Whether `vnode` runs unpaused and the published ends (as last polled, no request)
        show nothing more in its partitions: all its input is read, as far as is known."""
        table = self.table
        if vnode in table.paused or vnode not in table.active:
            return False
        offsets = {p: o for p, o in table.offsets.items() if table.vnode_of(p) == vnode}
        return self.log.caught_up(offsets)

    # -- figures -------------------------------------------------------------------------------
    async def source_lag(self, *, deadline: float) -> dict[int, int]:
        """Events behind the log's end, per consumed partition: the published ends (one
        conditional read per 1,024 partitions), else each partition's listed end."""
        offsets = dict(self.table.offsets)
        lag: dict[int, int] = {}
        async with within_deadline(self.clock, deadline, "source lag"):
            await self.log.poll_ends(offsets, deadline=deadline)
            for partition, offset in sorted(offsets.items()):
                end = await self.log.known_end(partition, deadline=deadline)
                lag[partition] = max(0, end - offset)
        return lag


@dataclass(frozen=True, slots=True)
class EngineView:
    """An engine with a data plane as metrics and the progress log read it: the registry, the
    host's figures with the reference engine's (events, offsets, lag), when it is one."""

    engine: BaseEngine
    host: VnodeHost
    plane: DataPlane

    def registry(self) -> RegistrySnapshot:
        """The assignment version the engine runs and its owners."""
        return self.engine.registry()

    def quiescent_through(self) -> int | None:
        """DC-21: the last committed checkpoint nothing changed after, or None (the host's)."""
        return self.host.quiescent_through()

    def progress(self) -> EngineProgress:
        """The host's figures, with the reference engine's events, offsets and pauses."""
        plane = self.plane
        if not isinstance(plane, StreamEngine):
            return engine_progress(self.host.progress())
        table, counters = plane.table, plane.counters
        return engine_progress(
            self.host.progress(),
            events=counters.events,
            batches=counters.batches,
            offsets=dict(sorted(table.offsets.items())),
            paused_partitions=len(table.paused_partitions()),
            figures=plane.processor.figures(),
        )

    async def source_lag(self, *, deadline: float) -> dict[int, int]:
        """The reference engine's lag; none for another plane."""
        plane = self.plane
        return await plane.source_lag(deadline=deadline) if isinstance(plane, StreamEngine) else {}


def embed_plane(
    *,
    clock: Clock,
    participant: FenceParticipant,
    plane: DataPlane,
    restorer: Restorer,
    config: EngineConfig | None = None,
    checkpointer: Checkpointer | None = None,
) -> EngineView:
    """A `BaseEngine` for `participant` running `plane`, restored through `restorer`, with the
    host's timings from `config`."""
    timings = (config or EngineConfig()).host_timings()
    engine = BaseEngine(
        clock=clock,
        participant=participant,
        checkpointer=checkpointer,
        data_plane=plane,
        restorer=restorer,
        timings=timings,
    )
    assert engine.host is not None  # a data plane was given
    return EngineView(engine, engine.host, plane)
