"""The reference jobs of `bench pipeline --job`, written with the public job API, and what
their output must be (computed independently, straight from the workload's generator).

Each job reads the store's record log of the workload's events `{"key": k, "value": v,
"ts_ms": t}` (`harness.workload.record_chunks`, written by `bench.pipeline_job.write_record_log`
and by the demo; `ts_ms` by `harness.workload.event_time_ms`, the Bytewax peer's rule too) and
writes its main output as JSON Lines files under its own prefix of the cluster's store
(`output_prefix(name)`):

* `count_sum`: per key the count and the sum of `value` (running aggregates, each flush
  emitting the keys changed since the last); the newest record of each key must equal
  `harness.workload.expected_aggregates`.
* `windowed`: per key one-minute tumbling windows of `ts_ms`, out of orderness 60 s like the
  Bytewax peer, `Count()`; late events go to their own prefix (there must be none), and the
  windows must equal `bench.bytewax_peer.expected_windows`.
* `keyed_step`: a pure-Python keyed step keeping per key `[count, last value]` and emitting
  `{"key": k, "count": c, "last": v}` at every `KEYED_STEP_EVERY`-th event of the key; the
  records must equal `expected_keyed_step`.

`wordcount` (of `bench files`, not a `bench pipeline --job` choice: it reads no record log)
reads the text files under `BOOKS_PREFIX` of the cluster's store (`bench.books`), splits each
line into lowercase words (`WORD`) and counts each word (`{"word": w, "count": c}`, Parquet):
a word's highest count must equal its count in the files.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from typing import Any, Final

from laminar_cluster.connectors.files import JsonLinesSink, ParquetSink
from laminar_cluster.connectors.sources import EventLogSource, FileSource
from laminar_cluster.harness.workload import Workload, chunks
from laminar_cluster.jobs import LATE, Count, Job, Sum, Tumbling

OUTPUT_ROOT: Final = "bench-output/"
WINDOW_MS: Final = 60_000
OUT_OF_ORDERNESS_MS: Final = 60_000
KEYED_STEP_EVERY: Final = 50
REFERENCE_JOBS: Final = ("count_sum", "windowed", "keyed_step")
BOOKS_PREFIX: Final = "books/"
WORD: Final = re.compile(r"[a-z']+")
StepRecords = dict[int, list[tuple[int, int]]]  # key -> [(count, last value), ...] in order


def output_prefix(name: str, stream: str = "main") -> str:
    """Where reference job `name` writes the records of `stream`."""
    return f"{OUTPUT_ROOT}{name}/{stream}/"


def step_key_count_last(state: list[int] | None, event: dict[str, Any]) -> Any:
    """The keyed step: count the key's events, keep the last value, emit every
    KEYED_STEP_EVERY-th event's `{"key", "count", "last"}` (a new state, never mutated)."""
    count = 1 if state is None else state[0] + 1
    value = event["value"]
    if count % KEYED_STEP_EVERY:
        return [count, value], ()
    return [count, value], ({"key": event["key"], "count": count, "last": value},)


count_sum = (
    Job("count_sum")
    .source(EventLogSource())
    .key_by(lambda e: e["key"])
    .aggregate(Count(), Sum(lambda e: e["value"]))
    .sink(JsonLinesSink(output_prefix("count_sum")))
)

windowed = (
    Job("windowed")
    .source(EventLogSource())
    .key_by(lambda e: e["key"])
    .event_time(lambda e: e["ts_ms"], out_of_orderness_ms=OUT_OF_ORDERNESS_MS)
    .window(Tumbling(WINDOW_MS), Count())
    .sink(JsonLinesSink(output_prefix("windowed")))
    .sink(JsonLinesSink(output_prefix("windowed", LATE), stream=LATE))
)

keyed_step = (
    Job("keyed_step")
    .source(EventLogSource())
    .key_by(lambda e: e["key"])
    .step(step_key_count_last, state_type=list[int] | None)
    .sink(JsonLinesSink(output_prefix("keyed_step")))
)


def words(line: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The lowercase words of one line of text (`{"text": ...}`), each as an event."""
    return ({"word": word} for word in WORD.findall(line["text"].lower()))


wordcount = (
    Job("wordcount")
    .source(FileSource(BOOKS_PREFIX, format="text", discover_interval_s=1.0))
    .flat_map(words)
    .key_by(lambda event: event["word"], name="word")
    .aggregate(Count(name="count"))
    .sink(ParquetSink(output_prefix("wordcount")))
)


def expected_keyed_step(workload: Workload) -> StepRecords:
    """Per key, the `(count, last)` of every record `keyed_step` emits, in order."""
    counts: collections.Counter[int] = collections.Counter()
    emitted: StepRecords = {}
    for chunk in chunks(workload):
        for key, value in zip(chunk.keys, chunk.values, strict=True):
            counts[key] += 1
            if counts[key] % KEYED_STEP_EVERY == 0:
                emitted.setdefault(key, []).append((counts[key], value))
    return emitted
