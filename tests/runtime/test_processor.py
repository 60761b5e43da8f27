"""`KeyedAggregation` (runtime/processor.py) and the engine's `VnodeTable`: aggregation per vnode,
snapshot and restore, output deltas since the last committed cut across commit and abort
(DC §1.9), and the partition bookkeeping (restored offsets, pauses, round-robin).
"""

from __future__ import annotations

import msgspec
import pytest

from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.runtime.output import aggregate_committed, decode_aggregate_records
from laminar_cluster.runtime.processor import (
    AggregateSlice,
    KeyedAggregation,
    Processor,
    decode_slice,
)
from laminar_cluster.runtime.vnode_table import VnodeTable


def test_keyed_aggregation_is_a_processor() -> None:
    def typed(processor: Processor) -> Processor:
        return processor

    assert typed(KeyedAggregation()) is not None


def test_aggregation_counts_and_sums_per_vnode() -> None:
    agg = KeyedAggregation()
    agg.add(0, (1, 2, 1), (10, 20, 5))
    agg.add(1, (1,), (7,))
    agg.add(0, (2,), (-3,))
    assert agg.totals(0) == {1: (2, 15), 2: (2, 17)}
    assert agg.totals(1) == {1: (1, 7)}
    assert agg.vnodes() == (0, 1)
    assert agg.events == 5


def test_snapshot_restores_the_same_state_as_a_committed_baseline() -> None:
    agg = KeyedAggregation()
    agg.add(3, (9, 4, 9), (1, 2, 3))
    data = agg.snapshot(3)
    assert agg.snapshot(3) == data  # deterministic: keys ascending
    other = KeyedAggregation()
    other.restore(3, data)
    assert other.totals(3) == {4: (1, 2), 9: (2, 4)}
    assert other.emit_output(3) == []  # restored state is history
    other.add(3, (9,), (10,))
    assert other.emit_output(3) == [(9, 1, 10)]
    empty = KeyedAggregation()
    empty.restore(5, None)
    assert empty.totals(5) == {} and decode_slice(empty.snapshot(5), what="x") == {}


def test_output_is_the_deltas_since_the_last_commit() -> None:
    agg = KeyedAggregation()
    agg.add(0, (1, 2), (10, 20))
    assert agg.emit_output(0) == [(1, 1, 10), (2, 1, 20)]
    agg.commit_output(0)
    assert agg.emit_output(0) == []
    agg.commit_output(0)
    agg.add(0, (2, 3), (5, 6))
    assert agg.emit_output(0) == [(2, 1, 5), (3, 1, 6)]


def test_abort_keeps_the_output_pending_and_merges_what_follows() -> None:
    agg = KeyedAggregation()
    agg.add(0, (1, 2), (10, 20))
    first = agg.emit_output(0)
    agg.abort_output(0)
    agg.add(0, (1,), (1,))
    assert first == [(1, 1, 10), (2, 1, 20)]
    assert agg.emit_output(0) == [(1, 2, 11), (2, 1, 20)]
    agg.commit_output(0)
    assert agg.emit_output(0) == []


def test_commit_folds_exactly_the_emitted_records() -> None:
    agg = KeyedAggregation()
    agg.add(0, (1,), (10,))
    agg.emit_output(0)
    agg.add(0, (1, 5), (2, 3))  # after the emit: stays pending
    agg.commit_output(0)
    assert agg.emit_output(0) == [(1, 1, 2), (5, 1, 3)]


def test_drop_forgets_state_and_output() -> None:
    agg = KeyedAggregation()
    agg.add(0, (1,), (10,))
    agg.emit_output(0)
    agg.drop(0)
    agg.commit_output(0)  # a no-op for a dropped vnode
    assert agg.totals(0) == {} and agg.emit_output(0) == [] and agg.vnodes() == ()


def test_a_capture_is_the_state_at_the_cut_while_processing_goes_on() -> None:
    agg = KeyedAggregation()
    agg.add(0, (7, 1), (1, 2))
    agg.add(1, (7,), (5,))
    encode = agg.capture((0, 1))
    agg.add(0, (7, 3), (100, 100))  # after the cut: neither in its state nor its output
    encoded = encode()
    assert set(encoded.states) == {0, 1}
    assert decode_slice(encoded.states[0], what="x") == {1: [1, 2], 7: [1, 1]}
    assert decode_slice(encoded.states[1], what="x") == {7: [1, 5]}
    # Each vnode's records, keys ascending within it; the reader sums a key across vnodes.
    decoded = decode_aggregate_records(encoded.output)
    assert sorted(decoded) == [(1, 1, 2), (7, 1, 1), (7, 1, 5)]
    assert aggregate_committed(decoded) == {1: (1, 2), 7: (2, 6)}
    agg.commit_output(0)
    agg.commit_output(1)
    assert agg.emit_output(0) == [(3, 1, 100), (7, 1, 100)]
    assert agg.totals(0) == {7: (2, 101), 1: (1, 2), 3: (1, 100)}


def test_a_cut_after_a_restore_or_drop_encodes_the_new_keys() -> None:
    """The sorted keys of a vnode's last cut are reused only for the same state: a restored
    or re-created vnode with as many (other) keys is sorted again."""
    agg = KeyedAggregation()
    agg.add(0, (2, 1), (1, 1))
    agg.capture((0,))()
    other = KeyedAggregation()
    other.add(0, (6, 5), (3, 4))
    agg.restore(0, other.snapshot(0))
    assert decode_slice(agg.capture((0,))().states[0], what="x") == {5: [1, 4], 6: [1, 3]}
    agg.drop(0)
    agg.add(0, (9, 8), (1, 2))
    assert decode_slice(agg.capture((0,))().states[0], what="x") == {8: [1, 2], 9: [1, 1]}
    agg.add(0, (8,), (5,))  # same keys: the previous order is reused
    assert decode_slice(agg.capture((0,))().states[0], what="x") == {8: [2, 7], 9: [1, 1]}
    agg.commit_output(0)
    agg.add(0, (10, 3, 8), (1, 1, 1))  # new keys merge into the previous order
    encoded = agg.capture((0,))()
    assert slice_keys(encoded.states[0]) == [3, 8, 9, 10]
    assert sorted(decode_aggregate_records(encoded.output)) == [(3, 1, 1), (8, 1, 1), (10, 1, 1)]


def slice_keys(state: bytes) -> list[int]:
    return list(msgspec.msgpack.decode(state, type=AggregateSlice).keys)


@pytest.mark.parametrize(
    "data",
    [
        b"not msgpack \xc1",
        msgspec.msgpack.encode(AggregateSlice(version=1, keys=[2, 1], counts=[1, 1], sums=[0, 0])),
        msgspec.msgpack.encode(AggregateSlice(version=1, keys=[1], counts=[1, 2], sums=[0])),
        msgspec.msgpack.encode(AggregateSlice(version=1, keys=[1], counts=[0], sums=[0])),
        msgspec.msgpack.encode([2, [1], [1], [1]]),
    ],
)
def test_a_corrupt_snapshot_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptRecord, match="vnode 4 state"):
        KeyedAggregation().restore(4, data)


def test_aggregation_handles_a_large_batch() -> None:
    agg = KeyedAggregation()
    keys = tuple(i % 97 for i in range(100_000))
    agg.add(2, keys, tuple(range(100_000)))
    totals = agg.totals(2)
    assert sum(count for count, _ in totals.values()) == 100_000
    assert sum(total for _, total in totals.values()) == sum(range(100_000))


# -- VnodeTable (the host's side of these moves is tests/rebalance/engine/test_vnode_host.py) --


def test_table_activates_a_restored_vnode_at_its_offsets() -> None:
    table = VnodeTable(8)
    assert table.consumable() == []
    table.restore(0, {4: 17}, empty=False, vnode_count=4)
    assert table.offsets == {0: 0, 4: 17}
    assert table.consumable() == [0, 4]
    assert table.cut_offsets((0,)) == {0: {0: 0, 4: 17}}


def test_table_refuses_an_offset_of_another_vnodes_partition() -> None:
    table = VnodeTable(8)
    with pytest.raises(CorruptRecord, match="partition 4"):
        table.restore(1, {4: 1}, empty=False, vnode_count=4)
    assert table.active == set() and table.offsets == {}


def test_table_drops_vnodes_and_pauses_the_ones_it_is_told() -> None:
    table = VnodeTable(8)
    for vnode in (0, 1):
        table.restore(vnode, {}, empty=True, vnode_count=4)
    table.pause(frozenset({1}))
    assert table.paused == {1} and table.consumable() == [0, 4]
    assert table.paused_partitions() == (1, 5)
    table.drop(1)
    table.pause(frozenset())
    assert table.offsets == {0: 0, 4: 0} and table.paused == frozenset()


def test_table_cuts_only_running_vnodes() -> None:
    table = VnodeTable(8)
    table.restore(0, {}, empty=True, vnode_count=4)
    with pytest.raises(InvalidArgument, match="vnode 1 is not running"):
        table.cut_offsets((0, 1))


def test_table_hands_out_partitions_round_robin() -> None:
    table = VnodeTable(6)
    for vnode in (0, 1):
        table.restore(vnode, {}, empty=True, vnode_count=2)
    seen = [p for _ in range(3) for p, _ in table.next_reads(4)]
    assert seen[:6] == [0, 1, 2, 3, 4, 5]
    assert sorted(seen) == sorted([0, 1, 2, 3, 4, 5] * 2)


def test_table_learns_the_partition_count_late() -> None:
    table = VnodeTable()
    table.restore(1, {9: 3}, empty=False, vnode_count=4)
    assert table.offsets == {9: 3}
    table.set_partitions(12)
    assert table.offsets == {1: 0, 5: 0, 9: 3}
