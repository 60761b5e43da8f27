"""`log_events`: the events a checkpoint consumed are its offsets over the event log's
partitions; a file source's split partitions (beyond them) hold file positions."""

from __future__ import annotations

from laminar_cluster.views.status_lag import log_events


def test_split_partitions_beyond_the_logs_are_not_events() -> None:
    offsets = {"0": 5, "255": 7, "256": (3 << 32) | 9, "511": 1 << 32}
    assert log_events(offsets, 256) == 12


def test_without_a_declared_log_every_offset_counts() -> None:
    assert log_events({"0": 5, "3": 7}, None) == 12
