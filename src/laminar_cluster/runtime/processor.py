"""`Processor`: the user's processing behind the engine, and `KeyedAggregation`, the reference
one (issue 7 "engine interface and a reference engine"; upstream_context §3.2, §3.3, §1.9).

The engine owns sources, ownership and checkpoints; a processor owns only data, split per vnode:

* `restore(vnode, state)`: install a vnode's state from a committed cut (None: start empty).
  The restored state is the committed baseline: its output is already history.
* `process(vnode, keys, values)`: one batch of events of one partition of the vnode, in order.
* `snapshot(vnode)`: the vnode's state at the cut, as opaque bytes for its `VnodePartial`.
* `emit_output(vnode)`: the sink records produced since the vnode's last committed cut. They are
  now *in flight*: `commit_output(vnode)` makes exactly those records history (the attempt
  committed); `abort_output(vnode)` leaves them pending, so the next `emit_output` returns them
  again, merged with what came after (common7 "Output semantics").
* `encode_output(records)`: the bytes of one participant's output (`Cut.output`).
* `drop(vnode)`: forget a vnode that left this process (or before a cold restore).

Every method is synchronous and never blocks: the engine calls them between awaits, which is
what makes each batch, cut and restore atomic with respect to the control plane.

`KeyedAggregation` keeps, per vnode, `key -> [count, sum]`. Its output is per-key deltas against
the committed baseline (a copy of the state at the last committed cut), so a batch costs one
dict update per event and an abort needs no rollback. Snapshot format: `AggregateSlice`
(msgspec msgpack, array-like: version, keys, counts, sums; keys ascending).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, Protocol

import msgspec

from laminar_cluster.codec import I64, U64
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.runtime.output import AggregateRecord, encode_aggregate_records


class Processor(Protocol):
    """What the engine drives per vnode (see the module docstring for the contract)."""

    def restore(self, vnode: int, state: bytes | None) -> None: ...

    def process(self, vnode: int, keys: Sequence[int], values: Sequence[int]) -> None: ...

    def snapshot(self, vnode: int) -> bytes: ...

    def emit_output(self, vnode: int) -> list[AggregateRecord]: ...

    def commit_output(self, vnode: int) -> None: ...

    def abort_output(self, vnode: int) -> None: ...

    def encode_output(self, records: list[AggregateRecord]) -> bytes: ...

    def drop(self, vnode: int) -> None: ...


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


class KeyedAggregation:
    """Count and sum per key, state per vnode (the reference `Processor`)."""

    def __init__(self) -> None:
        self._state: dict[int, dict[int, list[int]]] = {}
        # The committed baseline: key -> (count, sum) at the vnode's last committed cut.
        self._committed: dict[int, dict[int, tuple[int, int]]] = {}
        self._in_flight: dict[int, list[AggregateRecord]] = {}
        self.events = 0

    def vnodes(self) -> tuple[int, ...]:
        return tuple(sorted(self._state))

    def totals(self, vnode: int) -> dict[int, tuple[int, int]]:
        """The vnode's current `key -> (count, sum)` (tests and diagnostics)."""
        return {key: (entry[0], entry[1]) for key, entry in self._state.get(vnode, {}).items()}

    def restore(self, vnode: int, state: bytes | None) -> None:
        restored = {} if state is None else decode_slice(state, what=f"vnode {vnode} state")
        self._state[vnode] = restored
        self._committed[vnode] = {key: (entry[0], entry[1]) for key, entry in restored.items()}
        self._in_flight.pop(vnode, None)

    def process(self, vnode: int, keys: Sequence[int], values: Sequence[int]) -> None:
        state = self._state.get(vnode)
        if state is None:
            state = self._state[vnode] = {}
            self._committed.setdefault(vnode, {})
        get = state.get
        for key, value in zip(keys, values, strict=True):
            entry = get(key)
            if entry is None:
                state[key] = [1, value]
            else:
                entry[0] += 1
                entry[1] += value
        self.events += len(keys)

    def snapshot(self, vnode: int) -> bytes:
        return encode_slice(self._state.get(vnode, {}))

    def emit_output(self, vnode: int) -> list[AggregateRecord]:
        """Per-key deltas against the committed baseline (a key's count grows with every
        event, so an unchanged count means an unchanged key)."""
        committed = self._committed.get(vnode, {}).get
        records: list[AggregateRecord] = []
        append = records.append
        for key, (count, total) in self._state.get(vnode, {}).items():
            base = committed(key)
            if base is None:
                append((key, count, total))
            elif base[0] != count:
                append((key, count - base[0], total - base[1]))
        records.sort()
        self._in_flight[vnode] = records
        return records

    def commit_output(self, vnode: int) -> None:
        """The in-flight records are history: fold exactly them into the baseline (events
        processed after `emit_output` stay pending)."""
        records = self._in_flight.pop(vnode, None)
        if not records:
            return
        committed = self._committed.setdefault(vnode, {})
        for key, count, total in records:
            base = committed.get(key)
            committed[key] = (count, total) if base is None else (base[0] + count, base[1] + total)

    def abort_output(self, vnode: int) -> None:
        self._in_flight.pop(vnode, None)

    def encode_output(self, records: list[AggregateRecord]) -> bytes:
        """One triple per key (a key seen in several vnodes is summed), keys ascending."""
        merged: dict[int, list[int]] = {}
        get = merged.get
        for key, count, total in records:
            entry = get(key)
            if entry is None:
                merged[key] = [count, total]
            else:
                entry[0] += count
                entry[1] += total
        return encode_aggregate_records(
            (key, entry[0], entry[1]) for key, entry in sorted(merged.items())
        )

    def drop(self, vnode: int) -> None:
        self._state.pop(vnode, None)
        self._committed.pop(vnode, None)
        self._in_flight.pop(vnode, None)
