"""Source declarations a job names: where its events come from."""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.connectors.eventlog_records import (
    RECORD_PARTITIONS_DEFAULT,
    check_record_partitions,
)
from laminar_cluster.jobs import SourceSpec


@dataclass(frozen=True)
class EventLogSource(SourceSpec):
    """The store's record log (written by `Producer` or `laminar-cluster produce --file`):
    partition p read by the owner of vnode p % 256, offsets cut in every checkpoint.
    `partitions` is checked here (a multiple of 256); a node reads as many partitions as the
    log was declared with by its first producer."""

    partitions: int = RECORD_PARTITIONS_DEFAULT

    def __post_init__(self) -> None:
        check_record_partitions(self.partitions)

    def describe(self) -> str:
        """One line for logs."""
        return f"event log of records, {self.partitions} partitions"
