"""Bytewax 0.21 on the workload the nodes process: the peer `bench pipeline --job` compares the
nodes with (issue 16: "one worker with recovery snapshots every second against one node
checkpointing every second, both reading pre-written input").

Input: before any timing, `write_peer_input` writes the workload as JSON Lines, one file per
workload partition (`part-00007.jsonl`), each partition's events in their order in the stream,
a line per event: `{"key": k, "value": v}`, the keyed record the nodes read. For the windowed
job each line also carries the event time, `"ts_ms"`, by one rule the nodes' windowed job uses
too, `harness.workload.event_time_ms`: **ts_ms = offset_in_partition * EVENT_TIME_STEP_MS** (10
ms: the i-th event of a partition, counting from 0, happened at i * 10 ms), windows of
`WINDOW_MS` (one minute) aligned to 0, so an event belongs to window `ts_ms // 60,000`.

Run: each measurement initialises a fresh Bytewax recovery directory (one partition per
worker), then starts the Bytewax processes (`python -m laminar_cluster.bench.bytewax_flows`,
which calls `cli_main` like `python -m bytewax.run` does) with recovery on, snapshots (epochs)
every second. `workers` workers run as that many processes of one worker each, connected as a
Bytewax cluster (`-i`/`-a` of `bytewax.run`), unless `workers_per_process` puts several worker
threads in one process (`-w`). `seconds` is the wall time from starting the processes to the
exit of the last, measured outside them with `time.perf_counter` (interpreter start and imports
included; `startup_s` says how much of it passed before the dataflow was handed to Bytewax).

`measure_peer` runs a flow over input files its caller wrote (`bench files`: text files for
the `wordcount` flow) and checks the output with the caller's function.

Verify: the workers' output must equal the independent computation, `expected_aggregates` for
`count_sum`, `expected_windows` for `windowed` (with no event late: a late event would be a
count missing from its window), the counts of `expected_keyed_step` for `keyed_step`. A run
that computed anything else reports `verified: false`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Literal

import laminar_cluster
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument, LaminarError
from laminar_cluster.harness.reference_jobs import expected_keyed_step
from laminar_cluster.harness.workload import (
    Workload,
    chunks,
    event_time_ms,
    expected_aggregates,
)

Job = Literal["count_sum", "windowed", "keyed_step", "wordcount"]
WINDOW_MS: Final = 60_000
RUN_TIMEOUT_S: Final = 900.0
FLOWS_MODULE: Final = "laminar_cluster.bench.bytewax_flows"
WorkerWindows = dict[tuple[int, int], int]  # (key, window) -> events


@dataclass(frozen=True, slots=True)
class PeerFigures:
    """One Bytewax run: throughput over the whole workload and whether its output was right."""

    job: str
    events: int
    seconds: float
    events_per_s: int
    workers: int
    processes: int
    verified: bool
    startup_s: float  # of `seconds`: process start until the dataflow went to Bytewax
    late_events: int = 0  # windowed: events Bytewax found late (then verified is False)

    def as_json(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return asdict(self)

    @property
    def processing_per_s(self) -> int:
        """Events per second of its wall time less its start (the stricter figure)."""
        return round(self.events / max(self.seconds - self.startup_s, 1e-9))

    def ratios(self, per_s: float) -> tuple[float, float]:
        """`per_s` (the nodes' rate) over this run's processing rate, and over its wall
        rate: the `ratio` and `ratio_wall` the benches print."""
        return (
            round(per_s / max(self.processing_per_s, 1), 3),
            round(per_s / max(self.events_per_s, 1), 3),
        )


def write_peer_input(
    workload: Workload, directory: Path, *, event_time: bool = False
) -> list[Path]:
    """Write the workload as JSON Lines, one file per partition (created, even when empty):
    `{"key": k, "value": v}` per line, plus `"ts_ms"` (`event_time_ms`) if `event_time`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"part-{partition:05d}.jsonl" for partition in range(workload.partitions)]
    for path in paths:
        path.write_bytes(b"")
    offsets = [0] * workload.partitions
    for chunk in chunks(workload):
        lines: list[list[str]] = [[] for _ in range(workload.partitions)]
        for partition, key, value in zip(chunk.partitions, chunk.keys, chunk.values, strict=True):
            if event_time:
                ts_ms = event_time_ms(offsets[partition])
                offsets[partition] += 1
                lines[partition].append(f'{{"key": {key}, "value": {value}, "ts_ms": {ts_ms}}}\n')
            else:
                lines[partition].append(f'{{"key": {key}, "value": {value}}}\n')
        for path, partition_lines in zip(paths, lines, strict=True):
            if partition_lines:
                with path.open("a", encoding="utf-8") as file:
                    file.writelines(partition_lines)
    return paths


def expected_windows(workload: Workload) -> WorkerWindows:
    """Events per (key, one-minute window of event time), straight from the generator."""
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    offsets = [0] * workload.partitions
    for chunk in chunks(workload):
        for partition, key in zip(chunk.partitions, chunk.keys, strict=True):
            counts[key, event_time_ms(offsets[partition]) // WINDOW_MS] += 1
            offsets[partition] += 1
    return dict(counts)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _recovery_dirs(root: Path, processes: int, workers_per_process: int) -> list[Path]:
    """A fresh recovery directory per process, together one partition per worker."""
    from bytewax.recovery import init_db_dir

    staging = root / "recovery-init"
    staging.mkdir(parents=True)
    init_db_dir(staging, processes * workers_per_process)  # type: ignore[no-untyped-call]
    dirs = []
    for process in range(processes):
        own = root / f"recovery-{process}"
        own.mkdir()
        for worker in range(workers_per_process):
            name = f"part-{process * workers_per_process + worker}.sqlite3"
            (staging / name).rename(own / name)
        dirs.append(own)
    staging.rmdir()
    return dirs


def _commands(
    job: Job, input_dir: Path, output_dir: Path, recovery: list[Path], workers_per_process: int
) -> list[list[str]]:
    base = [sys.executable, "-m", FLOWS_MODULE, "--job", job, "--input", str(input_dir)]
    base += ["--output", str(output_dir), "--workers-per-process", str(workers_per_process)]
    if len(recovery) == 1:
        return [[*base, "--recovery", str(recovery[0])]]
    addresses = ";".join(f"127.0.0.1:{port}" for port in _free_ports(len(recovery)))
    return [
        [*base, "--recovery", str(own), "--process-id", str(process), "--addresses", addresses]
        for process, own in enumerate(recovery)
    ]


def _environment() -> dict[str, str]:
    """This process's environment with this checkout's package first on the path."""
    source = str(Path(laminar_cluster.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = source + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(commands: list[list[str]], logs: Path, timeout_s: float) -> tuple[float, float]:
    """Start every process, wait for all to exit; (seconds, startup seconds)."""
    env = _environment()
    processes: list[subprocess.Popen[bytes]] = []
    launched = time.monotonic()
    started = time.perf_counter()
    deadline = started + timeout_s
    try:
        for index, command in enumerate(commands):
            out = (logs / f"process-{index}.out").open("wb")
            err = (logs / f"process-{index}.err").open("wb")
            processes.append(subprocess.Popen(command, stdout=out, stderr=err, env=env))
        for index, process in enumerate(processes):
            try:
                process.wait(timeout=max(deadline - time.perf_counter(), 0.0))
            except subprocess.TimeoutExpired:
                raise DeadlineExceeded(
                    f"bytewax peer process {index}: not done in {timeout_s:.0f} s"
                ) from None
        seconds = time.perf_counter() - started
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for index, process in enumerate(processes):
        if process.returncode != 0:
            tail = (logs / f"process-{index}.err").read_text(errors="replace")[-2_000:]
            raise LaminarError(
                f"bytewax peer process {index}: exit status {process.returncode}\n{tail}"
            )
    handed_over = [_started_mono(logs / f"process-{i}.out") for i in range(len(processes))]
    return seconds, max(handed_over) - launched


def _started_mono(path: Path) -> float:
    for line in path.read_text().splitlines():
        if line.startswith("started_mono "):
            return float(line.split()[1])
    raise LaminarError(f"{path}: no started_mono line")


def _output_records(output_dir: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(output_dir.glob("out-*.jsonl")):
        with path.open(encoding="utf-8") as file:
            records.extend(json.loads(line) for line in file)
    return records


def verify_count_sum(workload: Workload, records: list[dict[str, Any]]) -> bool:
    """Exactly one totals record per key, equal to `expected_aggregates`."""
    got = {int(r["key"]): (int(r["count"]), int(r["sum"])) for r in records}
    return len(got) == len(records) and got == expected_aggregates(workload)


def verify_windowed(workload: Workload, records: list[dict[str, Any]]) -> tuple[bool, int]:
    """(one record per closed window, equal to `expected_windows`, and no late event; late)."""
    late = sum(1 for r in records if "late" in r)
    closed = [r for r in records if "late" not in r]
    got = {(int(r["key"]), int(r["window"])): int(r["count"]) for r in closed}
    return late == 0 and len(got) == len(closed) and got == expected_windows(workload), late


def verify_keyed_step(workload: Workload, records: list[dict[str, Any]]) -> bool:
    """Per key, the counts of the step's records equal `expected_keyed_step`'s. Their `last`
    values are not compared: Bytewax reads the partitions' files interleaved, so a key's
    events reach the step in another order than the stream's (the nodes' order)."""
    got: dict[int, list[int]] = {}
    for record in records:
        got.setdefault(int(record["key"]), []).append(int(record["count"]))
    expected = expected_keyed_step(workload)
    return {key: sorted(counts) for key, counts in got.items()} == {
        key: [count for count, _ in emitted] for key, emitted in expected.items()
    }


Verify = Callable[[list[dict[str, Any]]], tuple[bool, int]]  # records -> (verified, late)
WORKLOAD_JOBS: Final = ("count_sum", "windowed", "keyed_step")


def measure_peer(
    job: Job,
    *,
    input_dir: Path,
    events: int,
    verify: Verify,
    workers: int,
    tmp: Path,
    workers_per_process: int = 1,
    timeout_s: float = RUN_TIMEOUT_S,
) -> PeerFigures:
    """Run Bytewax flow `job` over the files the caller wrote in `input_dir` (module
    docstring), `events` its events, and `verify` the workers' output records. `workers` must
    be a multiple of `workers_per_process`; `tmp` is used and then emptied (not `input_dir`)."""
    if workers < 1 or workers_per_process < 1 or workers % workers_per_process:
        raise InvalidArgument(
            f"bytewax peer: {workers} workers in processes of {workers_per_process}"
        )
    run_dir = tmp / f"bytewax-{job}-{workers}w{workers_per_process}"
    shutil.rmtree(run_dir, ignore_errors=True)
    output_dir, logs = run_dir / "output", run_dir / "logs"
    for directory in (output_dir, logs):
        directory.mkdir(parents=True)
    try:
        recovery = _recovery_dirs(run_dir, workers // workers_per_process, workers_per_process)
        commands = _commands(job, input_dir, output_dir, recovery, workers_per_process)
        seconds, startup_s = _run(commands, logs, timeout_s)
        verified, late = verify(_output_records(output_dir))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return PeerFigures(
        job=job,
        events=events,
        seconds=round(seconds, 3),
        events_per_s=round(events / max(seconds, 1e-9)),
        workers=workers,
        processes=len(commands),
        verified=verified,
        startup_s=round(startup_s, 3),
        late_events=late,
    )


def _verify_workload(
    job: Job, workload: Workload, records: list[dict[str, Any]]
) -> tuple[bool, int]:
    if job == "count_sum":
        return verify_count_sum(workload, records), 0
    if job == "keyed_step":
        return verify_keyed_step(workload, records), 0
    return verify_windowed(workload, records)


def measure_bytewax(
    workload: Workload,
    *,
    job: Job,
    workers: int,
    tmp: Path,
    workers_per_process: int = 1,
    timeout_s: float = RUN_TIMEOUT_S,
) -> PeerFigures:
    """Write the workload under `tmp` (`write_peer_input`), run Bytewax over it and verify its
    output (`measure_peer`); `tmp` is used and then emptied."""
    if job not in WORKLOAD_JOBS:
        raise InvalidArgument(f"bytewax peer job {job!r}; known: {', '.join(WORKLOAD_JOBS)}")
    input_dir = tmp / f"bytewax-{job}-input"
    shutil.rmtree(input_dir, ignore_errors=True)
    try:
        write_peer_input(workload, input_dir, event_time=job == "windowed")
        return measure_peer(
            job,
            input_dir=input_dir,
            events=workload.events,
            verify=lambda records: _verify_workload(job, workload, records),
            workers=workers,
            tmp=tmp,
            workers_per_process=workers_per_process,
            timeout_s=timeout_s,
        )
    finally:
        shutil.rmtree(input_dir, ignore_errors=True)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m laminar_cluster.bench.bytewax_peer",
        description="Bytewax 0.21 on the bench workload (recovery on, snapshots every 1 s).",
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--job", choices=WORKLOAD_JOBS, default="count_sum")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--workers-per-process", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args()


def main() -> None:
    """Measure once and print the figures (`--json`: as one JSON object)."""
    arguments = _arguments()
    workload = Workload(
        seed=arguments.seed,
        events=arguments.events,
        partitions=arguments.partitions,
        keys=arguments.keys,
    )
    with tempfile.TemporaryDirectory(prefix="laminar-bytewax-peer-") as tmp:
        figures = measure_bytewax(
            workload,
            job=arguments.job,
            workers=arguments.workers,
            tmp=Path(tmp),
            workers_per_process=arguments.workers_per_process,
        )
    if arguments.json:
        print(json.dumps(figures.as_json()))
        return
    print(
        f"bytewax {figures.job}: {figures.events:,} events, {figures.workers} worker(s) in "
        f"{figures.processes} process(es): {figures.events_per_s:,} events/s "
        f"({figures.seconds:.2f} s, {figures.startup_s:.2f} s of it starting); "
        f"verified: {figures.verified}"
        + (f", late: {figures.late_events}" if figures.late_events else "")
    )


if __name__ == "__main__":
    main()
