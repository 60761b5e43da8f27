"""`Processor`: the user's processing behind the engine, and `KeyedAggregation`, the reference
one (issue 7 "engine interface and a reference engine"; DC §3.2, DC §3.3, DC §1.9).

The engine owns sources, ownership and checkpoints; a processor owns only data, split per vnode:

* `restore(vnode, state)`: install a vnode's state from a committed cut (None: start empty).
  The restored state is the committed baseline: its output is already history.
* `process(vnode, partition, batch)`: one batch of events of one partition of the vnode, in
  order (`SourceBatch`: its offsets and its events, in the shape the engine's reader gives).
  It applies the whole batch or raises before changing anything it cannot undo: the engine
  moves the partition's offset only after it returns.
* `capture(vnodes)`: the cut. Synchronous and cheap: it freezes the state of `vnodes` as it is
  now and puts each one's output since its last committed cut *in flight*. It returns the
  encoder of that frozen cut (each vnode's state bytes for its `VnodePartial`, and the
  participant's output bytes, `Cut.output`); the encoder reads only what was frozen, so the
  engine runs it in a worker thread while `process` goes on.
* `commit_output(vnode)`: the in-flight output is history (the attempt committed); events
  processed after the cut stay pending. `abort_output(vnode)`: it stays pending, so the next
  capture emits it again, merged with what came after (DC §1.9).
* `drop(vnode)`: forget a vnode that left this process (or before a cold restore).
* `figures()`: counts worth showing (a job's late events and dead letters; none here).
* `quiescent()`: nothing would change at a cut without new events (DC-21's quiet checkpoints
  skip only then); a job whose idle windows are due to close says False.

Every method except the encoder is synchronous and never blocks: the engine calls them between
awaits, which is what makes each batch, cut and restore atomic with respect to the control
plane.

`KeyedAggregation` keeps, per vnode, two columns `key -> count` and `key -> sum` (a batch costs
two dict updates per event). A cut copies both (C-level dict copies: the copy-on-write
snapshot); its output is the per-key deltas of that copy against the committed baseline, the
copy of the last committed cut, so a commit just makes the in-flight copy the baseline and an
abort needs no rollback. Snapshot format: `AggregateSlice` (msgspec msgpack, array-like:
version, keys, counts, sums; keys ascending). Output: each vnode's deltas in the order its keys
first appeared; a key of several vnodes appears once per vnode (`aggregate_committed` sums
them), so encoding costs no per-key merge or sort.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, Protocol

import msgspec

from laminar_cluster.codec import I64, U64
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.runtime.engine_types import SourceBatch
from laminar_cluster.runtime.output import (
    AggregateRecord,
    check_aggregate_columns,
    decode_aggregate_records,
    encode_checked_aggregate_records,
)


class EncodedCut(NamedTuple):
    """What a cut's encoder returns: each vnode's state bytes and the participant's output."""

    states: dict[int, bytes]
    output: bytes


class Processor(Protocol):
    """What the engine drives per vnode (see the module docstring for the contract)."""

    def restore(self, vnode: int, state: bytes | None) -> None: ...

    def process(self, vnode: int, partition: int, batch: SourceBatch) -> None: ...

    def capture(self, vnodes: Sequence[int]) -> Callable[[], EncodedCut]: ...

    def commit_output(self, vnode: int) -> None: ...

    def abort_output(self, vnode: int) -> None: ...

    def drop(self, vnode: int) -> None: ...

    def quiescent(self) -> bool: ...

    def figures(self) -> dict[str, int]: ...


class AggregateSlice(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """One vnode's aggregation state: parallel columns, keys strictly ascending."""

    version: Literal[1]
    keys: list[U64]
    counts: list[U64]
    sums: list[I64]


_SLICE_ENCODER: Final = msgspec.msgpack.Encoder()
_SLICE_DECODER: Final = msgspec.msgpack.Decoder(AggregateSlice, strict=True)


def encode_slice(state: dict[int, list[int]]) -> bytes:
    keys = sorted(state)
    counts = [state[key][0] for key in keys]
    sums = [state[key][1] for key in keys]
    return _SLICE_ENCODER.encode(AggregateSlice(version=1, keys=keys, counts=counts, sums=sums))


def decode_slice(data: bytes, *, what: str) -> dict[int, list[int]]:
    """The `key -> [count, sum]` map `data` holds; CorruptRecord if it is not exactly that."""
    try:
        value = _SLICE_DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise CorruptRecord(f"{what}: not an aggregate slice: {error}") from None
    keys = value.keys
    if not len(keys) == len(value.counts) == len(value.sums):
        raise CorruptRecord(
            f"{what}: {len(keys)} keys, {len(value.counts)} counts and {len(value.sums)} sums"
        )
    if any(keys[i] >= keys[i + 1] for i in range(len(keys) - 1)):
        raise CorruptRecord(f"{what}: keys are not strictly ascending")
    if any(count == 0 for count in value.counts):
        raise CorruptRecord(f"{what}: a key has count 0")
    return {
        key: [count, total]
        for key, count, total in zip(keys, value.counts, value.sums, strict=True)
    }


class _KeysHint:
    """The ascending keys of a vnode's last encoded cut, for one incarnation of its state (a
    restore or drop starts a new one). Keys are only ever added within an incarnation, in
    insertion order, so a later cut's first `len(keys)` keys are exactly these: only the keys
    after them are new. Any cut's hint of the incarnation is right, whichever thread wrote it
    last."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: list[int] | None = None


@dataclass(frozen=True, slots=True)
class _Frozen:
    """One vnode at a cut: copies of its columns, never mutated afterwards (so they may be read
    by another thread while `process` goes on), and its committed baseline at that moment."""

    counts: dict[int, int]
    sums: dict[int, int]
    base_counts: dict[int, int]
    base_sums: dict[int, int]
    hint: _KeysHint


class KeyedAggregation:
    """Count and sum per key, state per vnode (the reference `Processor`)."""

    def __init__(self) -> None:
        self._counts: dict[int, dict[int, int]] = {}
        self._sums: dict[int, dict[int, int]] = {}
        # The committed baseline: the columns of the vnode's last committed cut (never mutated).
        self._base: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
        self._in_flight: dict[int, _Frozen] = {}
        self._hints: dict[int, _KeysHint] = {}
        self.events = 0

    def vnodes(self) -> tuple[int, ...]:
        return tuple(sorted(self._counts))

    def totals(self, vnode: int) -> dict[int, tuple[int, int]]:
        """The vnode's current `key -> (count, sum)` (tests and diagnostics)."""
        counts, sums = self._counts.get(vnode, {}), self._sums.get(vnode, {})
        return {key: (count, sums[key]) for key, count in counts.items()}

    def restore(self, vnode: int, state: bytes | None) -> None:
        restored = {} if state is None else decode_slice(state, what=f"vnode {vnode} state")
        counts = {key: entry[0] for key, entry in restored.items()}
        sums = {key: entry[1] for key, entry in restored.items()}
        self.drop(vnode)
        self._counts[vnode], self._sums[vnode] = counts, sums
        self._base[vnode] = (counts.copy(), sums.copy())

    def process(self, vnode: int, partition: int, batch: SourceBatch) -> None:
        """Count and sum the batch's `(keys, values)` columns per key."""
        keys, values = batch.events
        self.add(vnode, keys, values)

    def add(self, vnode: int, keys: Sequence[int], values: Sequence[int]) -> None:
        """Count and sum `keys`' `values` in `vnode`."""
        counts = self._counts.get(vnode)
        if counts is None:
            counts = self._counts[vnode] = {}
            self._sums[vnode] = {}
        sums = self._sums[vnode]
        count_of, sum_of = counts.get, sums.get
        for key, value in zip(keys, values, strict=True):
            counts[key] = count_of(key, 0) + 1
            sums[key] = sum_of(key, 0) + value
        self.events += len(keys)

    def capture(self, vnodes: Sequence[int]) -> Callable[[], EncodedCut]:
        """Freeze `vnodes` (two dict copies each) and put their output in flight; the returned
        encoder reads only the frozen copies, so it may run in a worker thread."""
        frozen = [(vnode, self._freeze(vnode)) for vnode in vnodes]
        for vnode, cut in frozen:
            self._in_flight[vnode] = cut

        def encode() -> EncodedCut:
            states: dict[int, bytes] = {}
            records: list[AggregateRecord] = []
            for vnode, cut in frozen:
                states[vnode] = _encode_columns(cut.counts, cut.sums, cut.hint)
                records.extend(_deltas(cut))
            return EncodedCut(states=states, output=encode_checked_aggregate_records(records))

        return encode

    def snapshot(self, vnode: int) -> bytes:
        """The vnode's state now (tests and diagnostics; the engine uses `capture`)."""
        counts, sums = self._counts.get(vnode, {}), self._sums.get(vnode, {})
        return _encode_columns(counts, sums, _KeysHint())

    def emit_output(self, vnode: int) -> list[AggregateRecord]:
        """`capture` of one vnode, its records decoded, keys ascending (tests and
        diagnostics)."""
        return sorted(decode_aggregate_records(self.capture((vnode,))().output))

    def commit_output(self, vnode: int) -> None:
        """The in-flight cut is history: its columns become the baseline (events processed
        after the cut stay pending)."""
        cut = self._in_flight.pop(vnode, None)
        if cut is not None:
            self._base[vnode] = (cut.counts, cut.sums)

    def abort_output(self, vnode: int) -> None:
        self._in_flight.pop(vnode, None)

    def drop(self, vnode: int) -> None:
        self._counts.pop(vnode, None)
        self._sums.pop(vnode, None)
        self._base.pop(vnode, None)
        self._in_flight.pop(vnode, None)
        self._hints.pop(vnode, None)

    def quiescent(self) -> bool:
        """Always: a cut without new events changes nothing."""
        return True

    def figures(self) -> dict[str, int]:
        """None: every event is counted, none is late or a dead letter."""
        return {}

    def _freeze(self, vnode: int) -> _Frozen:
        empty: dict[int, int] = {}
        base_counts, base_sums = self._base.get(vnode, (empty, empty))
        hint = self._hints.get(vnode)
        if hint is None:
            hint = self._hints[vnode] = _KeysHint()
        return _Frozen(
            counts=self._counts.get(vnode, empty).copy(),
            sums=self._sums.get(vnode, empty).copy(),
            base_counts=base_counts,
            base_sums=base_sums,
            hint=hint,
        )


def _encode_columns(counts_of: dict[int, int], sums_of: dict[int, int], hint: _KeysHint) -> bytes:
    """The `AggregateSlice` bytes of one vnode: keys ascending. Keys are only ever added, in
    insertion order, so the keys beyond the hint's are exactly the new ones: the hint and the
    new keys are two runs that one (timsort) merge orders; the columns are C-level `map`s."""
    keys = hint.keys
    if keys is None or len(keys) > len(counts_of):
        keys = sorted(counts_of)
    elif len(keys) < len(counts_of):
        keys = sorted(itertools.chain(keys, itertools.islice(counts_of, len(keys), None)))
    hint.keys = keys  # one reference store: safe from a worker thread
    counts = list(map(counts_of.__getitem__, keys))
    sums = list(map(sums_of.__getitem__, keys))
    return _SLICE_ENCODER.encode(AggregateSlice(version=1, keys=keys, counts=counts, sums=sums))


def _deltas(cut: _Frozen) -> list[AggregateRecord]:
    """Per-key `(key, count delta, sum delta)` against the baseline, in insertion order. The
    baseline is an earlier copy of the same columns, so its keys are, in the same order, the
    first keys of the cut's (both columns insert a key together): the deltas are two C-level
    `map`s over the values, no lookup per key. A key changed iff its count grew (every event
    adds one)."""
    base = len(cut.base_counts)
    keys, counts, sums = list(cut.counts), list(cut.counts.values()), list(cut.sums.values())
    if base == 0:
        check_aggregate_columns(keys, counts, sums)
        return list(zip(keys, counts, sums, strict=True))
    last = base - 1  # our own invariant, checked cheaply at the baseline's last key
    assert base <= len(counts) and list(itertools.islice(cut.counts, last, base)) == list(
        itertools.islice(cut.base_counts, last, base)
    ), "the baseline is not a prefix of the vnode's keys"
    count_deltas = list(map(operator.sub, counts, cut.base_counts.values()))
    count_deltas.extend(counts[base:])
    sum_deltas = list(map(operator.sub, sums, cut.base_sums.values()))
    sum_deltas.extend(sums[base:])
    check_aggregate_columns(keys, count_deltas, sum_deltas)  # before writing (a superset)
    changed = zip(keys, count_deltas, sum_deltas, strict=True)
    return list(itertools.compress(changed, count_deltas))
