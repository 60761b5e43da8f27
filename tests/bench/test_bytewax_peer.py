"""The Bytewax peer of `bench pipeline --job`: its input is the workload, written before any
timing; Bytewax 0.21 runs it in subprocesses with recovery on (1 worker, and 2 workers as two
processes) and its output equals the independent computation for both jobs; the verifier
refuses a wrong output. Small workloads; never a timing assertion."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from laminar_cluster.bench.bytewax_peer import (
    expected_windows,
    measure_bytewax,
    verify_count_sum,
    verify_keyed_step,
    verify_windowed,
    write_peer_input,
)
from laminar_cluster.harness.reference_jobs import expected_keyed_step
from laminar_cluster.harness.workload import (
    Workload,
    chunks,
    expected_aggregates,
    partition_counts,
)

pytest.importorskip("bytewax")

COUNT_SUM = Workload(seed=11, events=20_000, partitions=8, keys=500)
# 2 partitions of ~10,000 events: event times up to ~100 s, so two windows per key.
WINDOWED = Workload(seed=11, events=20_000, partitions=2, keys=300)


def _windows_by_hand(workload: Workload) -> dict[tuple[int, int], int]:
    """(key, minute) counts from the generator: the i-th event of a partition is at i * 10 ms."""
    seen: collections.Counter[int] = collections.Counter()
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    for chunk in chunks(workload):
        for partition, key in zip(chunk.partitions, chunk.keys, strict=True):
            counts[key, seen[partition] * 10 // 60_000] += 1
            seen[partition] += 1
    return dict(counts)


def test_peer_input_is_the_workload_one_file_per_partition_with_offset_event_times(
    tmp_path: Path,
) -> None:
    paths = write_peer_input(WINDOWED, tmp_path, event_time=True)
    assert [p.name for p in paths] == ["part-00000.jsonl", "part-00001.jsonl"]
    lines = [[json.loads(line) for line in p.read_text().splitlines()] for p in paths]
    assert [len(part) for part in lines] == partition_counts(WINDOWED)
    for part in lines:
        assert [event["ts_ms"] for event in part] == [10 * i for i in range(len(part))]
    stream = next(chunks(WINDOWED))
    first = [
        (k, v)
        for p, k, v in zip(stream.partitions, stream.keys, stream.values, strict=True)
        if p == 0
    ][:50]
    assert [(e["key"], e["value"]) for e in lines[0][:50]] == first
    plain = write_peer_input(COUNT_SUM, tmp_path / "plain")
    assert set(json.loads(plain[0].read_text().splitlines()[0])) == {"key", "value"}


@pytest.mark.processes
def test_count_sum_on_one_worker_equals_the_expected_aggregates(tmp_path: Path) -> None:
    figures = measure_bytewax(COUNT_SUM, job="count_sum", workers=1, tmp=tmp_path)
    assert figures.verified
    assert (figures.events, figures.workers, figures.processes) == (20_000, 1, 1)
    assert figures.events_per_s > 0
    assert list(tmp_path.iterdir()) == []  # input, recovery and output removed


@pytest.mark.processes
def test_count_sum_on_two_worker_processes_equals_the_expected_aggregates(tmp_path: Path) -> None:
    figures = measure_bytewax(COUNT_SUM, job="count_sum", workers=2, tmp=tmp_path)
    assert figures.verified
    assert (figures.workers, figures.processes) == (2, 2)


@pytest.mark.processes
def test_windowed_counts_equal_the_windows_counted_by_hand(tmp_path: Path) -> None:
    by_hand = _windows_by_hand(WINDOWED)
    assert {window for _, window in by_hand} == {0, 1}
    assert expected_windows(WINDOWED) == by_hand
    figures = measure_bytewax(WINDOWED, job="windowed", workers=1, tmp=tmp_path)
    assert figures.verified
    assert figures.late_events == 0


def test_the_verifiers_refuse_a_wrong_count_a_missing_key_and_a_late_event() -> None:
    totals = [
        {"key": k, "count": c, "sum": s} for k, (c, s) in expected_aggregates(COUNT_SUM).items()
    ]
    assert verify_count_sum(COUNT_SUM, totals)
    assert not verify_count_sum(COUNT_SUM, totals[1:])
    assert not verify_count_sum(
        COUNT_SUM, [{**totals[0], "count": totals[0]["count"] + 1}, *totals[1:]]
    )
    assert not verify_count_sum(COUNT_SUM, [*totals, totals[0]])
    windows = [
        {"key": k, "window": w, "count": c} for (k, w), c in _windows_by_hand(WINDOWED).items()
    ]
    assert verify_windowed(WINDOWED, windows) == (True, 0)
    assert verify_windowed(WINDOWED, [*windows, {"key": 1, "window": 0, "late": 1}]) == (False, 1)
    assert verify_windowed(WINDOWED, windows[1:])[0] is False


# 20,000 events over 100 keys: about 200 a key, so each key's step emits about 4 records.
KEYED = Workload(seed=11, events=20_000, partitions=8, keys=100)


@pytest.mark.processes
def test_keyed_step_on_one_worker_emits_the_nodes_step_records_counts(tmp_path: Path) -> None:
    expected = expected_keyed_step(KEYED)
    assert sum(len(records) for records in expected.values()) >= 300
    figures = measure_bytewax(KEYED, job="keyed_step", workers=1, tmp=tmp_path)
    assert figures.verified


def test_the_keyed_step_verifier_refuses_a_missing_or_extra_record() -> None:
    records = [
        {"key": k, "count": c, "last": v}
        for k, emitted in expected_keyed_step(KEYED).items()
        for c, v in emitted
    ]
    assert verify_keyed_step(KEYED, records)
    assert not verify_keyed_step(KEYED, records[1:])
    assert not verify_keyed_step(KEYED, [*records, records[0]])
