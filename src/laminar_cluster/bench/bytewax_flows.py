"""The Bytewax 0.21 dataflows `bench pipeline` runs as its peer, and their runner (the module a
peer subprocess runs: `python -m laminar_cluster.bench.bytewax_flows ...`).

The flows read the pre-written JSON Lines files of `bytewax_peer.write_peer_input` through
Bytewax's own `DirSource` (one file per workload partition, one Bytewax partition per file;
Bytewax spreads the files over the workers) and parse each line with `json.loads`, the way a
Bytewax user writes it:

* `count_sum`: per key the count and the sum of `value` (`op.fold_final`, state kept per key
  and snapshotted every epoch), the final totals emitted at the end of the input as
  `{"key": k, "count": c, "sum": s}`.
* `windowed`: per key one-minute tumbling windows of event time `ts_ms`, aligned to 0
  (`count_window` with an `EventClock` waiting `OUT_OF_ORDERNESS_MS`, windows closed by later
  events or at the end of the input, not by a system-time timer), each closed window emitted as
  `{"key": k, "window": w, "count": c}` with w = ts_ms // 60,000, and every event Bytewax found
  late for its window as `{"key": k, "window": w, "late": 1}` (never dropped silently).
* `keyed_step`: per key the nodes' pure-Python step (`reference_jobs.step_key_count_last`,
  state `[count, last value]`) in `op.stateful_map`, each record it emits written as it is,
  `{"key": k, "count": c, "last": v}`.
* `wordcount` (of `bench files`): the plain text files `*.txt` (`bench.books`) instead, each
  line split into its lowercase words by the nodes' regex (`reference_jobs.WORD`, in
  `op.flat_map`), each word counted (`op.count_final` keyed by the word), the counts emitted
  at the end of the input as `{"word": w, "count": c}`.

The runner calls `bytewax._bytewax.cli_main`, which `python -m bytewax.run` calls too: recovery
on (`RecoveryConfig(db_dir, backup_interval=0)` over partitions the parent initialised), epoch
interval 1 s, which with recovery on is Bytewax's snapshot interval (`bytewax.run -s 1`). Each
worker writes its output lines to its own file `out-<worker>.jsonl` under `--output`. Before
handing over to Bytewax the runner prints `started_mono <CLOCK_MONOTONIC seconds>` so that the
parent can tell interpreter start from the run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TextIO

from bytewax import operators as op
from bytewax._bytewax import cli_main
from bytewax.connectors.files import DirSource
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig

from laminar_cluster.bench.bytewax_peer import WINDOW_MS
from laminar_cluster.harness.reference_jobs import WORD, step_key_count_last

JOBS: Final = ("count_sum", "windowed", "keyed_step", "wordcount")
# Events of one key reach a worker from up to 64 files read round-robin, 1,000 lines a batch
# (DirSource's batch size): 10 s of event time apart within a worker, more between workers.
OUT_OF_ORDERNESS_MS: Final = 60_000
SNAPSHOT_INTERVAL_S: Final = 1
INPUT_GLOB: Final = "*.jsonl"
TEXT_GLOB: Final = "*.txt"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class _LinesPartition(StatelessSinkPartition[str]):
    """One worker's output file, a line per item."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("w", encoding="utf-8")

    def write_batch(self, items: list[str]) -> None:
        self._file.writelines(item + "\n" for item in items)

    def close(self) -> None:
        self._file.close()


class LinesSink(DynamicSink[str]):
    """Each worker writes its items as lines of `directory/out-<worker>.jsonl`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _LinesPartition:
        return _LinesPartition(self.directory / f"out-{worker_index}.jsonl")


def _key_value(line: str) -> tuple[str, int]:
    event = json.loads(line)
    return str(event["key"]), event["value"]


def _add(totals: tuple[int, int], value: int) -> tuple[int, int]:
    return totals[0] + 1, totals[1] + value


def _totals_line(item: tuple[str, tuple[int, int]]) -> str:
    key, (count, total) = item
    return json.dumps({"key": int(key), "count": count, "sum": total})


def count_sum_flow(input_dir: Path, output_dir: Path) -> Dataflow:
    """Count and sum of `value` per key; the totals at the end of the input."""
    flow = Dataflow("count_sum")
    lines = op.input("read", flow, DirSource(input_dir, glob_pat=INPUT_GLOB))
    keyed = op.map("parse", lines, _key_value)
    totals = op.fold_final("count_sum", keyed, lambda: (0, 0), _add)
    op.output("write", op.map("format", totals, _totals_line), LinesSink(output_dir))
    return flow


def _event_time(event: dict[str, Any]) -> datetime:
    return _EPOCH + timedelta(milliseconds=event["ts_ms"])


def _no_wake_up(close_at: datetime) -> datetime | None:
    """Replayed input: windows close on later events or at EOF, never on a system-time timer
    (with the default, a close time in 1970 is always due and wakes every key on every
    activation)."""
    return None


def _window_line(item: tuple[str, tuple[int, int]]) -> str:
    key, (window, count) = item
    return json.dumps({"key": int(key), "window": window, "count": count})


def _late_line(item: tuple[str, tuple[int, Any]]) -> str:
    key, (window, _event) = item
    return json.dumps({"key": int(key), "window": window, "late": 1})


def windowed_flow(input_dir: Path, output_dir: Path) -> Dataflow:
    """Per key one-minute tumbling event-time windows of count; late events on the side."""
    flow = Dataflow("windowed")
    lines = op.input("read", flow, DirSource(input_dir, glob_pat=INPUT_GLOB))
    events = op.map("parse", lines, json.loads)
    clock = EventClock(
        ts_getter=_event_time,
        wait_for_system_duration=timedelta(milliseconds=OUT_OF_ORDERNESS_MS),
        to_system_utc=_no_wake_up,
    )
    windower = TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=_EPOCH)
    counted = count_window("count", events, clock, windower, key=lambda e: str(e["key"]))
    closed = op.map("format", counted.down, _window_line)
    late = op.map("format_late", counted.late, _late_line)
    op.output("write", op.merge("all", closed, late), LinesSink(output_dir))
    return flow


def _keyed_event(line: str) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    return str(event["key"]), event


def _step(state: list[int] | None, event: dict[str, Any]) -> tuple[list[int], str | None]:
    state, outputs = step_key_count_last(state, event)
    return state, json.dumps(outputs[0]) if outputs else None


def keyed_step_flow(input_dir: Path, output_dir: Path) -> Dataflow:
    """The nodes' pure-Python keyed step (`reference_jobs.step_key_count_last`) per key."""
    flow = Dataflow("keyed_step")
    lines = op.input("read", flow, DirSource(input_dir, glob_pat=INPUT_GLOB))
    stepped = op.stateful_map("step", op.map("parse", lines, _keyed_event), _step)
    emitted = op.filter_map("emitted", stepped, lambda item: item[1])
    op.output("write", emitted, LinesSink(output_dir))
    return flow


def _words(line: str) -> list[str]:
    return WORD.findall(line.lower())


def _count_line(item: tuple[str, int]) -> str:
    word, count = item
    return json.dumps({"word": word, "count": count})


def wordcount_flow(input_dir: Path, output_dir: Path) -> Dataflow:
    """The count of each lowercase word of the text files; the counts at the end of the input."""
    flow = Dataflow("wordcount")
    lines = op.input("read", flow, DirSource(input_dir, glob_pat=TEXT_GLOB))
    words = op.flat_map("split", lines, _words)
    counts = op.count_final("count", words, lambda word: word)
    op.output("write", op.map("format", counts, _count_line), LinesSink(output_dir))
    return flow


FLOWS: Final[dict[str, Callable[[Path, Path], Dataflow]]] = {
    "count_sum": count_sum_flow,
    "windowed": windowed_flow,
    "keyed_step": keyed_step_flow,
    "wordcount": wordcount_flow,
}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m laminar_cluster.bench.bytewax_flows")
    parser.add_argument("--job", choices=JOBS, required=True)
    parser.add_argument("--input", type=Path, required=True, help="the input files' directory")
    parser.add_argument("--output", type=Path, required=True, help="the output directory")
    parser.add_argument("--recovery", type=Path, required=True, help="initialised db dir")
    parser.add_argument("--workers-per-process", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=None)
    parser.add_argument("--addresses", default=None, help="host:port;host:port (processes)")
    return parser.parse_args()


def main() -> None:
    """Run one Bytewax process of the peer (see the module docstring)."""
    arguments = _arguments()
    flow = FLOWS[arguments.job](arguments.input, arguments.output)
    addresses = None if arguments.addresses is None else arguments.addresses.split(";")
    # Bytewax's stubs for its Rust functions carry no annotations (mypy's no-untyped-call).
    recovery = RecoveryConfig(arguments.recovery, timedelta(0))  # type: ignore[no-untyped-call]
    print(f"started_mono {time.monotonic()}", flush=True)
    cli_main(  # type: ignore[no-untyped-call]
        flow,
        workers_per_process=arguments.workers_per_process,
        process_id=arguments.process_id,
        addresses=addresses,
        epoch_interval=timedelta(seconds=SNAPSHOT_INTERVAL_S),
        recovery_config=recovery,
    )


if __name__ == "__main__":
    main()
