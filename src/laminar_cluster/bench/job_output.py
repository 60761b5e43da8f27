"""What a reference job delivered, read back from its JSON Lines sink files, and whether it
equals the independent computation (`harness.reference_jobs`).

`SinkFiles` reads a sink prefix of the store: the files of committed checkpoints, in key order
(which is checkpoint id order, then node id: `connectors.file_paths`), each read once (they
are create-only). The verifiers take every record delivered so far:

* `count_sum`: the newest record of each key (running aggregates re-emit a key at each flush
  that changed it) equals `expected_aggregates`, and no key is missing or extra;
* `windowed`: exactly one record per (key, window), equal to `expected_windows`, and no late
  record;
* `keyed_step`: per key the records in order equal `expected_keyed_step`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.harness.exactly_once import record_totals
from laminar_cluster.harness.reference_jobs import WINDOW_MS, StepRecords, output_prefix
from laminar_cluster.harness.workload import Aggregates
from laminar_cluster.jobs import LATE
from laminar_cluster.store import ObjectStore

LIST_PAGE_KEYS: Final = 1_000
_RECORD: Final = msgspec.json.Decoder(dict[str, Any])
Records = list[dict[str, Any]]
Verdict = tuple[bool, str]  # (equal, one line saying what differs or what matched)


def json_lines(key: str, body: bytes) -> Records:
    """The records of a JSON Lines sink file (CorruptRecord for a line that is not one)."""
    try:
        return [_RECORD.decode(line) for line in body.splitlines() if line]
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise CorruptRecord(f"{key}: a line is not a JSON object: {error}", key=key) from None


def parquet_rows(key: str, body: bytes) -> Records:
    """The rows of a Parquet sink file (CorruptRecord if it cannot be read as Parquet)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # the optional `parquet` extra
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        rows: Records = pq.read_table(pa.BufferReader(body)).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as error:
        raise CorruptRecord(f"{key}: not readable as Parquet: {error}", key=key) from None
    return rows


@dataclass
class SinkFiles:
    """The records of the files under one sink prefix, read incrementally (`decode`: how a
    file's body becomes records, JSON Lines unless told)."""

    store: ObjectStore
    prefix: str
    files: dict[str, Records] = field(default_factory=dict)
    decode: Callable[[str, bytes], Records] = json_lines

    async def read_new(self) -> Records:
        """The records of the files not read before, file after file in key order."""
        offset: str | None = None
        new: list[str] = []
        while True:
            page = await self.store.list(self.prefix, offset=offset, limit=LIST_PAGE_KEYS)
            for meta in page:
                if meta.key not in self.files:
                    body = (await self.store.get(meta.key)).body
                    self.files[meta.key] = self.decode(meta.key, body)
                    new.append(meta.key)
            if len(page) < LIST_PAGE_KEYS:
                break
            offset = page[-1].key
        return [record for key in sorted(new) for record in self.files[key]]

    async def records(self) -> Records:
        """Every record delivered so far, file after file in key order."""
        await self.read_new()
        return [record for key in sorted(self.files) for record in self.files[key]]


def verify_count_sum(expected: Aggregates, records: Records) -> Verdict:
    """The newest (count, sum) of each key equals `expected` (module docstring)."""
    newest = record_totals(records)
    if newest == expected:
        return True, f"{len(expected):,} keys' count and sum as computed"
    wrong = sum(1 for key, value in expected.items() if newest.get(key) != value)
    extra = len(set(newest) - set(expected))
    return False, f"{wrong:,} of {len(expected):,} keys differ or are missing; {extra} extra"


def verify_windowed(expected: dict[tuple[int, int], int], records: Records, late: int) -> Verdict:
    """One record per (key, window), equal to `expected`, and `late` == 0."""
    got = {
        (int(r["key"]), int(r["window_start_ms"]) // WINDOW_MS): int(r["count"]) for r in records
    }
    if got == expected and len(got) == len(records) and late == 0:
        return True, f"{len(expected):,} windows as computed, none late"
    wrong = sum(1 for window, count in expected.items() if got.get(window) != count)
    twice = len(records) - len(got)
    return False, (
        f"{wrong:,} of {len(expected):,} windows differ or are missing; {twice} emitted "
        f"twice; {late} late records"
    )


def verify_keyed_step(expected: StepRecords, records: Records) -> Verdict:
    """Per key, the (count, last) records in order equal `expected`."""
    got: StepRecords = {}
    for record in records:
        got.setdefault(int(record["key"]), []).append((int(record["count"]), int(record["last"])))
    if got == expected:
        return True, f"{len(records):,} step records of {len(expected):,} keys as computed"
    wrong = sum(1 for key, value in expected.items() if got.get(key) != value)
    return False, f"{wrong:,} of {len(expected):,} keys' step records differ or are missing"


async def verify_reference_output(
    store: ObjectStore,
    clock: Clock,
    name: str,
    expected: Any,
    *,
    timeout_s: float,
    poll_s: float = 1.0,
) -> Verdict:
    """Poll the sink files of reference job `name` until they equal `expected` (the verdict
    then) or `timeout_s` passes (the last verdict: False and what differs)."""
    main = SinkFiles(store, output_prefix(name))
    late = SinkFiles(store, output_prefix(name, LATE))
    deadline = clock.monotonic() + timeout_s
    while True:
        records = await main.records()
        if name == "count_sum":
            verdict = verify_count_sum(expected, records)
        elif name == "windowed":
            verdict = verify_windowed(expected, records, len(await late.records()))
        else:
            verdict = verify_keyed_step(expected, records)
        if verdict[0] or clock.monotonic() + poll_s > deadline:
            return verdict
        await clock.sleep(poll_s)
