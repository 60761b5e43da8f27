"""Source declarations a job names: where its events come from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from laminar_cluster.connectors.eventlog_records import (
    RECORD_PARTITIONS_DEFAULT,
    check_record_partitions,
)
from laminar_cluster.connectors.file_formats import FILE_FORMATS
from laminar_cluster.connectors.file_paths import validate_sink_prefix
from laminar_cluster.connectors.file_targets import shown_url
from laminar_cluster.errors import InvalidArgument
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


@dataclass(frozen=True)
class FileSource(SourceSpec):
    """Files landing under `prefix` of an object store (docs/jobs.md, "File sources"): JSON
    Lines, CSV, Parquet or plain text (`format`, else from each name's extension), each file
    read whole by the owner of its vnode, new files found every `discover_interval_s` by the
    leader, the read position cut in every checkpoint. Files are not partitioned by key: a
    job's events are repartitioned to their keys' owners through the store's record log of
    `partitions` partitions (exactly once; the cost is in docs/jobs.md). `url`: None for the
    cluster's own store, else the URL of another store (`s3://bucket`, ...). A file must be
    written whole (a single PUT) and never changed after."""

    repartitioned: ClassVar[bool] = True

    prefix: str
    format: str | None = None
    url: str | None = None
    partitions: int = RECORD_PARTITIONS_DEFAULT
    discover_interval_s: float = 10.0

    def __post_init__(self) -> None:
        validate_sink_prefix(self.prefix, what="source")
        if self.format is not None and self.format not in FILE_FORMATS:
            raise InvalidArgument(
                f"file source format {self.format!r} is not one of {', '.join(FILE_FORMATS)}"
            )
        if self.url is not None and (not isinstance(self.url, str) or "://" not in self.url):
            raise InvalidArgument(
                f"file source url {self.url!r}: write None (the cluster's store) or a store "
                "URL such as s3://bucket"
            )
        check_record_partitions(self.partitions)
        if not 0.1 <= self.discover_interval_s <= 3600:
            raise InvalidArgument(
                f"discover_interval_s {self.discover_interval_s} is outside 0.1..3600 seconds"
            )

    def describe(self) -> str:
        """One line for logs."""
        where = "the cluster's store" if self.url is None else shown_url(self.url)
        return f"files under {self.prefix} of {where} ({self.format or 'format by extension'})"
