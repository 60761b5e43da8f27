"""A file source as the engine's partitioned source (docs/jobs.md, "File sources").

A job with a `FileSource` reads two kinds of partitions, both cut with their vnode in every
checkpoint: the record log's `P` partitions (the repartitioned events, `connectors.exchange`)
and one *split partition* per vnode, `P + v`, standing for the files of vnode `v` in catalog
order (`connectors.file_catalog`). A split partition's offset is `seq << 32 | record`: the
next record of file `seq`; a file read to its end moves it to `(seq + 1) << 32`, so offsets only
grow and a restored cut resumes inside the file it names. The first read of a file fetches it
whole (a file is at most 256 MiB) and parses it (`connectors.file_formats`); a file stays parsed
until it is read to its end, the open files holding at most 512 MiB (more files wait their
turn, so the reads of many vnodes never evict each other's files). A file that cannot be read
as catalogued (gone, changed, unknown format) becomes one record that is not a JSON object,
which the job sends to its dead letters: nothing is skipped silently.

`SplitLog` is the engine's `SourceLog` over both kinds; `read_splits` its `BatchReader`. The
catalog is refreshed (one GET when nothing is new) at most every `discover_interval_s`, when
the engine polls its ends after an idle wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.file_catalog import CatalogFile, FileCatalog
from laminar_cluster.connectors.file_formats import format_of, parse_file
from laminar_cluster.errors import InvalidArgument, ObjectNotFound
from laminar_cluster.runtime.engine_types import BatchReader, SourceBatch
from laminar_cluster.store import ObjectStore

RECORD_BITS: Final = 32
RECORD_MASK: Final = (1 << RECORD_BITS) - 1
# The files being read, held parsed until read to their end: at most this many of their
# bytes (one file always); a file not read for OPEN_FILE_IDLE_S (its vnode moved) is let go.
OPEN_FILES_BYTES_MAX: Final = 512 * 1024 * 1024
OPEN_FILE_IDLE_S: Final = 30.0
# A split batch: at most this many records and bytes (and one more record), so that routing
# it (every record through the job's flat_map and key) holds the event loop briefly.
BATCH_RECORDS_MAX: Final = 1_024
BATCH_BYTES_MAX: Final = 1024 * 1024


class FileRecords(NamedTuple):
    """Records `first_record ..` of file `file` (catalog seq `seq`): a split batch's events."""

    file: str
    seq: int
    first_record: int
    records: Sequence[bytes]


@dataclass(slots=True)
class _OpenFile:
    records: list[bytes]
    size: int
    read_s: float  # when it was last read (clock.monotonic())


def split_offset(seq: int, record: int) -> int:
    """The split partition offset of record `record` of file `seq`."""
    return seq << RECORD_BITS | record


class FileSplits:
    """Reads the files of each vnode from the catalog (module docstring)."""

    def __init__(
        self,
        catalog: FileCatalog,
        files: ObjectStore,
        clock: Clock,
        *,
        file_format: str | None,
        interval_s: float,
    ) -> None:
        self.catalog, self.files, self.clock = catalog, files, clock
        self.file_format, self.interval_s = file_format, interval_s
        self._refresh_after = 0.0
        self._open: dict[int, _OpenFile] = {}  # seq -> a file being read
        self._read_at: dict[int, int] = {}  # vnode -> the offset last read from (for lag)

    async def poll(self, *, deadline: float) -> bool:
        """Refresh the catalog if `interval_s` passed since the last refresh; whether it grew."""
        now = self.clock.monotonic()
        if now < self._refresh_after:
            return False
        self._refresh_after = now + self.interval_s
        return await self.catalog.refresh(deadline=deadline)

    def caught_up(self, vnode: int, offset: int) -> bool:
        """Whether no catalogued file of `vnode` is left to read from `offset`."""
        return self.catalog.next_file(vnode, offset >> RECORD_BITS) is None

    def read_at(self, vnode: int) -> int:
        """The offset `vnode`'s split was last read from (0 before any read)."""
        return self._read_at.get(vnode, 0)

    def pending(self, vnode: int) -> int:
        """Files of `vnode` not read to their end, from where it last read."""
        return self.catalog.pending(vnode, self._read_at.get(vnode, 0) >> RECORD_BITS)

    async def read(
        self, vnode: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[FileRecords | None, int]:
        """Up to `max_events` records of `vnode`'s files from `offset`, and the next offset;
        (None, offset) when there is nothing to read."""
        self._read_at[vnode] = offset
        await self.poll(deadline=deadline)  # a busy engine polls no ends: keep the catalog fresh
        wanted = offset >> RECORD_BITS
        seq = self.catalog.next_file(vnode, wanted)
        if seq is None:
            return None, offset
        first = offset & RECORD_MASK if seq == wanted else 0
        records = await self._records(seq, deadline)
        if records is None:
            return None, offset  # other files are being read: this one waits its turn
        chunk = _within_bytes(records, first, max_events)
        end = first + len(chunk)
        following = split_offset(seq, end)
        if end >= len(records):
            following = split_offset(seq + 1, 0)
            self._open.pop(seq, None)
        return FileRecords(self.catalog.files[seq].name, seq, first, chunk), following

    async def _records(self, seq: int, deadline: float) -> list[bytes] | None:
        """File `seq` parsed; None while the files open leave no room for it."""
        now = self.clock.monotonic()
        found = self._open.get(seq)
        if found is None:
            for stale in [q for q, f in self._open.items() if now - f.read_s > OPEN_FILE_IDLE_S]:
                del self._open[stale]
            size = self.catalog.files[seq].size
            held = sum(f.size for f in self._open.values())
            if self._open and held + size > OPEN_FILES_BYTES_MAX:
                return None
            found = self._open[seq] = _OpenFile(
                await self._load(self.catalog.files[seq], deadline), size, now
            )
        found.read_s = now
        return found.records

    async def _load(self, file: CatalogFile, deadline: float) -> list[bytes]:
        name = file.name
        try:
            fmt = format_of(name, self.file_format)
            result = await retry_until(
                lambda: self.files.get(name),
                what=f"get {name}",
                clock=self.clock,
                deadline=deadline,
            )
        except (InvalidArgument, ObjectNotFound) as error:
            return [_unreadable(name, str(error))]
        if result.meta.size != file.size or (
            file.e_tag is not None and result.meta.e_tag not in (None, file.e_tag)
        ):
            return [
                _unreadable(
                    name,
                    f"changed after it was found ({result.meta.size} bytes, catalogued "
                    f"{file.size}); a file under a source prefix must not change",
                )
            ]
        return parse_file(fmt, name, result.body)


def _within_bytes(records: list[bytes], first: int, max_events: int) -> list[bytes]:
    """Records from `first`: at most `max_events` and BATCH_RECORDS_MAX, and no more once
    `BATCH_BYTES_MAX` bytes are taken (at least one)."""
    chunk = records[first : first + min(max_events, BATCH_RECORDS_MAX)]
    taken = 0
    for index, record in enumerate(chunk):
        taken += len(record)
        if taken >= BATCH_BYTES_MAX:
            return chunk[: index + 1]
    return chunk


def _unreadable(name: str, reason: str) -> bytes:
    """The one record an unreadable file becomes: not a JSON object, so a dead letter."""
    return f"file {name} cannot be read: {reason}".encode()


class SplitLog:
    """The engine's source for a file-source job: record partitions below `partitions`, the
    split partition of vnode v at `partitions + v` (module docstring)."""

    def __init__(self, log: EventLog, splits: FileSplits, partitions: int) -> None:
        self.log, self.splits, self.base = log, splits, partitions

    async def read(
        self, partition: int, offset: int, max_events: int, *, deadline: float
    ) -> tuple[Sequence[int], Sequence[int], int]:
        raise InvalidArgument("a file source job reads records (read_splits), not int columns")

    async def partitions(self, *, deadline: float) -> int | None:
        """The record log's partitions (declared now if it is not) and the vnodes' splits."""
        await self.log.declare_records(self.base, deadline=deadline)
        return self.base + VNODE_COUNT

    async def poll_ends(self, partitions: Iterable[int], *, deadline: float) -> bool:
        """Poll the record log's index and, when due, the catalog; whether either moved."""
        records = [p for p in partitions if p < self.base]
        moved = await self.log.poll_ends(records, deadline=deadline) if records else False
        return await self.splits.poll(deadline=deadline) or moved

    async def known_end(self, partition: int, *, deadline: float) -> int:
        """A record partition's end; for a split, where it was read plus its files pending."""
        if partition < self.base:
            return await self.log.known_end(partition, deadline=deadline)
        vnode = partition - self.base
        return self.splits.read_at(vnode) + self.splits.pending(vnode)

    async def end_offset(self, partition: int, *, deadline: float) -> int:
        """`known_end` (a split has no end but its catalog's)."""
        return await self.known_end(partition, deadline=deadline)

    def caught_up(self, offsets: Mapping[int, int]) -> bool:
        """Record partitions as the log's polled ends say; splits as the catalog known."""
        records = {p: o for p, o in offsets.items() if p < self.base}
        if records and not self.log.caught_up(records):
            return False
        return all(
            self.splits.caught_up(p - self.base, o) for p, o in offsets.items() if p >= self.base
        )


def read_splits(split_log: SplitLog, room: Callable[[], bool]) -> BatchReader:
    """The reader of a file-source job: record batches' events are the records' JSON bytes,
    split batches' a `FileRecords` (None when there is nothing to read, or while `room()` is
    False: the routed events not yet committed are at their budget)."""
    log, splits, base = split_log.log, split_log.splits, split_log.base

    async def read(partition: int, offset: int, max_events: int, *, deadline: float) -> SourceBatch:
        if partition < base:
            records, next_offset = await log.read_records(
                partition, offset, max_events, deadline=deadline
            )
            return SourceBatch(offset, next_offset, records)
        if not room():
            return SourceBatch(offset, offset, None, 0)
        found, next_offset = await splits.read(
            partition - base, offset, max_events, deadline=deadline
        )
        count = 0 if found is None else len(found.records)
        return SourceBatch(offset, next_offset, found, count)

    return read
