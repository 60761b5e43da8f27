"""Exactly-once file sinks: Parquet and JSON Lines files in the bucket, in another bucket or in
a plain local directory (docs/protocols/file-sink.md; the sink's `url`, `file_targets`).

On an object store (the cluster's, or the one `url` names), each delivery (one participant's
records of one committed checkpoint) becomes one object,
`{prefix}checkpoint={checkpoint_id:020d}/node={node_id:020d}.parquet` (or `.jsonl`), written
create-only, so files appear only for committed checkpoints, whole or not at all, and a replay
finds its file there and writes nothing (FO-1, FO-2). One file per participant per committed
checkpoint that has output: an empty delivery writes nothing. The job's name is not in the key:
one prefix per job, and two jobs must never share a prefix. A plain directory has the same
layout, written by `file_directory.DirectorySinkWriter` (create by hard link, FD-1 .. FD-3).

Readers take the files as they are, e.g. DuckDB:
`SELECT * FROM read_parquet('s3://bucket/out/clicks/**/*.parquet', union_by_name=true)` or
`read_ndjson('.../**/*.jsonl')`. DuckDB's hive partitioning adds a `checkpoint` column from the
directory names unless `hive_partitioning=false`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Final

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.codec.types import U64_MAX
from laminar_cluster.connectors.delivery import Delivery, Sink, SinkWriter
from laminar_cluster.connectors.file_directory import DirectorySinkWriter
from laminar_cluster.connectors.file_encoding import FileFormat, encode_within
from laminar_cluster.connectors.file_paths import (
    bind_job,
    check_ids,
    checkpoint_offset,
    checkpoints_prefix,
    delivery_path,
    parse_delivery_path,
    validate_sink_prefix,
)
from laminar_cluster.connectors.file_targets import shown_url, sink_directory
from laminar_cluster.errors import (
    CorruptRecord,
    ObjectAlreadyExists,
    ObjectNotFound,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import (
    CREATE,
    ObjectMeta,
    ObjectStore,
    ReadBack,
    open_store,
    read_back,
)

LIST_PAGE_KEYS: Final = 1_000  # keys of the first listing; fewer back means the whole prefix
PROBE_KEYS: Final = 8  # keys per probe of the search for the newest checkpoint
PROBE_PAGES_MAX: Final = 128  # pages of foreign keys one probe skips before giving up
SEARCH_PROBES_MAX: Final = 2 * 66  # galloping then bisecting over 0..=U64_MAX


@dataclass(frozen=True)
class _FileSink(Sink):
    """A file sink: one file per participant per committed checkpoint with output, under
    `prefix`, of the records of Emit stream `stream`. `url`: where the files go
    (`file_targets`): None for the cluster's own store, a plain directory (`file:///abs/dir`)
    whose files readers take in place, or a separate object store (`s3://bucket`)."""

    prefix: str
    url: str | None = field(default=None, kw_only=True, repr=False)  # may hold secrets
    file_format: ClassVar[FileFormat]
    label: ClassVar[str]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_target(self.prefix, self.url)

    def describe(self) -> str:
        """One line for logs (no secrets)."""
        return f"{self.label} files under {self.prefix}{_where(self.url)} (stream {self.stream})"

    def open(self, store: ObjectStore, clock: Clock) -> SinkWriter:
        """The writer of this sink: on `store` when `url` is None, else on its target."""
        return _open_writer(self.url, store, clock, self.prefix, self.file_format)


@dataclass(frozen=True)
class ParquetSink(_FileSink):
    """Parquet files (zstd) under `prefix`, one per participant per committed checkpoint with
    output, of the records of Emit stream `stream`. Columns are inferred per file: read with
    `union_by_name`. See `file_encoding` for the records Parquet cannot hold. `url`: None for
    the cluster's own store, a plain directory (`file:///abs/dir`) whose files readers take in
    place, or a separate object store (`s3://bucket`)."""

    file_format: ClassVar[FileFormat] = FileFormat.PARQUET
    label: ClassVar[str] = "Parquet"


@dataclass(frozen=True)
class JsonLinesSink(_FileSink):
    """JSON Lines files under `prefix`, one per participant per committed checkpoint with
    output, of the records of Emit stream `stream`: one JSON object per line, UTF-8. `url` as
    for `ParquetSink`."""

    file_format: ClassVar[FileFormat] = FileFormat.JSON_LINES
    label: ClassVar[str] = "JSON Lines"


def _check_target(prefix: str, url: str | None) -> None:
    validate_sink_prefix(prefix)
    sink_directory(url)  # InvalidArgument for a URL that names no target


def _where(url: str | None) -> str:
    return "" if url is None else f" in {shown_url(url)}"


def _open_writer(
    url: str | None, store: ObjectStore, clock: Clock, prefix: str, file_format: FileFormat
) -> SinkWriter:
    directory = sink_directory(url)
    if directory is not None:
        return DirectorySinkWriter(directory, clock, prefix=prefix, file_format=file_format)
    if url is None:
        return FileSinkWriter(store, clock, prefix=prefix, file_format=file_format)
    own = open_store(url)  # a separate store, closed by the writer's close()
    return FileSinkWriter(own, clock, prefix=prefix, file_format=file_format, owns_store=True)


class FileSinkWriter:
    """The `SinkWriter` of one file sink: one create-only object per non-empty delivery.

    The writer serves one job: a delivery or query naming another job is InvalidArgument (two
    jobs must not share a prefix; the key does not name the job).
    """

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        *,
        prefix: str,
        file_format: FileFormat,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        self.owns_store = owns_store  # close() closes the store
        self.clock = clock
        self.prefix = validate_sink_prefix(prefix)
        self.file_format = file_format
        self.job: str | None = None  # the job this writer serves, bound on first use

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        """Create the delivery's file: True if this call created it, False if it was already
        there (a replay) or the delivery is empty. A file already there is left as it is, even
        if its bytes differ from what this call would write: the first write wins, and the
        delivery counts as delivered (FO-2)."""
        self.job = bind_job(self.job, delivery.job, self.prefix)
        check_ids(delivery.checkpoint_id, delivery.node_id)
        if not delivery.records:
            return False  # FO-3: no file for a checkpoint without output
        key = delivery_path(
            self.prefix, self.file_format.extension, delivery.checkpoint_id, delivery.node_id
        )
        body = await encode_within(
            self.clock, self.file_format, delivery.records, key=key, deadline=deadline
        )
        return await self._create(key, body, deadline)

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        """The highest checkpoint id with a file under the prefix, None if none. One LIST when
        the prefix holds fewer than LIST_PAGE_KEYS objects, else at most about 130 small LISTs
        (a galloping then bisecting search over the key order, FO-4). Keys under the prefix
        that are not this sink's delivery keys are ignored."""
        self.job = bind_job(self.job, job, self.prefix)
        first = await self._list(checkpoints_prefix(self.prefix), None, LIST_PAGE_KEYS, deadline)
        found = self._checkpoints(first)
        if len(first) < LIST_PAGE_KEYS:
            return max(found, default=None)
        return await self._search(max(found, default=-1), deadline)

    async def close(self) -> None:
        """Close the store if this writer opened it (a sink `url`); the cluster's store belongs
        to the caller."""
        if self.owns_store:
            await self.store.close()

    async def _create(self, key: str, body: bytes, deadline: float) -> bool:
        """FO-1/FO-2: create-only, retried within the deadline. A create retried after an
        unknown outcome reads back: the object with exactly our bytes then counts as ours."""
        unsure = False

        async def attempt() -> bool:
            nonlocal unsure
            try:
                await self.store.put(key, body, CREATE)
                return True
            except ObjectAlreadyExists:
                pass  # there is an object, or S3 refused a racing create without writing (409)
            except WriteOutcomeUnknown:
                unsure = True  # our create may have landed
            return await self._settle(key, body, unsure)

        return await retry_until(attempt, what=f"create {key}", clock=self.clock, deadline=deadline)

    async def _settle(self, key: str, body: bytes, unsure: bool) -> bool:
        """After a create that did not answer Created: False if the file is there (ours only
        if an earlier attempt's outcome was unknown and the bytes are ours); StoreUnavailable,
        so that the create is retried, if nothing is there or the read failed. Retrying a
        create is safe: it never replaces an object."""
        try:
            if not unsure:
                await self.store.head(key)
                return False
            found = await read_back(self.store, key, body)
        except ObjectNotFound:
            found = None
        except WriteOutcomeUnknown as error:  # the read-back failed
            raise StoreUnavailable(f"{key}: read-back failed: {error}") from error
        if found is None or found.state is ReadBack.ABSENT:
            raise StoreUnavailable(f"{key}: the create did not land and no object is there")
        return found.ours

    async def _list(
        self, prefix: str, offset: str | None, limit: int, deadline: float
    ) -> list[ObjectMeta]:
        async def attempt() -> list[ObjectMeta]:
            return await self.store.list(prefix, offset=offset, limit=limit)

        return await retry_until(
            attempt, what=f"list {prefix}", clock=self.clock, deadline=deadline
        )

    def _checkpoints(self, metas: list[ObjectMeta]) -> list[int]:
        parsed = (
            parse_delivery_path(self.prefix, self.file_format.extension, m.key) for m in metas
        )
        return [p[0] for p in parsed if p is not None]

    async def _search(self, known: int, deadline: float) -> int | None:
        """The newest checkpoint with a file, given one that has (`known`, or -1): gallop up
        from it, then bisect. Invariant: a file of checkpoint `low` exists (or low == -1), and
        none of a checkpoint >= `high`."""
        low, high, step, galloping = known, U64_MAX + 1, 1, True
        for _ in range(SEARCH_PROBES_MAX):
            if high - low <= 1:
                return low if low >= 0 else None
            probe = min(low + step, high - 1) if galloping else (low + high) // 2
            found = await self._first_at_or_after(probe, deadline)
            if found is None:
                high, galloping = probe, False
            else:
                low, step = max(low, found), step * 2
        raise AssertionError(f"{self.prefix}: search did not converge in {SEARCH_PROBES_MAX}")

    async def _first_at_or_after(self, checkpoint_id: int, deadline: float) -> int | None:
        """The lowest checkpoint >= `checkpoint_id` with a file, None if none."""
        prefix = checkpoints_prefix(self.prefix)
        offset = checkpoint_offset(self.prefix, checkpoint_id)
        for _ in range(PROBE_PAGES_MAX):
            page = await self._list(prefix, offset, PROBE_KEYS, deadline)
            found = self._checkpoints(page)
            if found:
                return found[0]
            if len(page) < PROBE_KEYS:
                return None
            offset = page[-1].key
        raise CorruptRecord(
            f"{prefix}: more than {PROBE_PAGES_MAX * PROBE_KEYS} keys that are not delivery files"
            f" after {checkpoint_offset(self.prefix, checkpoint_id)}"
        )
