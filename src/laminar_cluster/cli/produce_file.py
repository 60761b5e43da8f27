"""`laminar-cluster produce --file PATH|- --key FIELD`: JSON Lines into the store's record log.

Each line is one JSON object; its field FIELD (a str or an int) is the event's key, and the
whole object the event (`connectors.producer.Producer`). Lines are read from line
`--from-line N` on (the first N - 1 skipped). A line that is not a JSON object, lacks FIELD,
holds a key of another type or an event larger than 64 KiB stops the command: the lines
before it are written (flushed), and one error line names the line, what is wrong, how many
events were written, and `--from-line N` to continue once the line is fixed. Exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import msgspec

from laminar_cluster.cli.app import say_error
from laminar_cluster.cli.produce import PROGRESS_INTERVAL_S, say
from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.producer import Producer
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.output import print_json, run_on_store

EXIT_BAD_INPUT: Final = 2
_DECODER: Final = msgspec.json.Decoder()


@dataclass
class _Run:
    """What a run wrote so far, and the bad line that stopped it (if any)."""

    events: int = 0
    bytes: int = 0
    last_line: int = 0
    bad_line: int | None = None
    problem: str = ""


class BadLine(Exception):
    """Internal: the line's content is not an event; the text says why."""


def run_produce_file(
    url: str,
    *,
    path: str,
    key_field: str,
    partitions: int,
    from_line: int,
    timeout_s: float,
    as_json: bool,
) -> int:
    """Append the events of the JSON Lines at `path` ("-": stdin); print progress (unless
    `as_json`) and the figures. 0, or 2 for a bad line (after writing the lines before it)."""
    if from_line < 1:
        raise InvalidArgument(f"--from-line {from_line}: lines are numbered from 1")
    clock = RealClock()
    run = _Run()

    async def work(store: ObjectStore) -> dict[str, Any]:
        started = clock.monotonic()
        producer = Producer(store, partitions=partitions, clock=clock, timeout_s=timeout_s)
        with _opened(path) as lines:
            await _send_lines(producer, lines, key_field, from_line, run, started)
        await producer.flush()
        run.events = producer.events_sent
        elapsed_s = clock.monotonic() - started
        return {
            "store": store.url,
            "file": path,
            "partitions": partitions,
            "from_line": from_line,
            "events": run.events,
            "bytes": run.bytes,
            "elapsed_s": round(elapsed_s, 3),
            "events_per_s": round(run.events / max(elapsed_s, 1e-9)),
            "bad_line": run.bad_line,
            "problem": run.problem or None,
        }

    figures = run_on_store(url, work)
    if as_json:
        print_json(figures)
    else:
        say(
            f"appended {figures['events']:,} events ({figures['bytes']:,} bytes) in "
            f"{figures['elapsed_s']:.2f} s: {figures['events_per_s']:,} events/s"
        )
    if run.bad_line is None:
        return 0
    _report_bad_line(run, from_line)
    return EXIT_BAD_INPUT


async def _send_lines(
    producer: Producer,
    lines: Iterator[tuple[int, bytes]],
    key_field: str,
    from_line: int,
    run: _Run,
    started: float,
) -> None:
    """Send each line from `from_line` on; stop at the first bad one (noted in `run`)."""
    clock = producer.log.clock
    shown = started
    for number, line in lines:
        if number < from_line:
            continue
        try:
            key, event = _event_of(line, key_field)
            await producer.send(key, event)
        except (BadLine, InvalidArgument) as error:
            run.bad_line, run.problem = number, str(error)
            return
        run.last_line, run.bytes = number, run.bytes + len(line)
        now = clock.monotonic()
        if now - shown >= PROGRESS_INTERVAL_S:
            shown = now
            sent = producer.events_sent + producer.buffered_events
            say(
                f"produced {sent:,} events (line {number:,}), "
                f"{sent / max(now - started, 1e-9):,.0f} events/s"
            )


def _event_of(line: bytes, key_field: str) -> tuple[str | int, dict[str, Any]]:
    try:
        value = _DECODER.decode(line)
    except msgspec.DecodeError as error:
        raise BadLine(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise BadLine(f"a JSON {type(value).__name__}, not an object")
    if key_field not in value:
        raise BadLine(f"no field {key_field!r}")
    key = value[key_field]
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise BadLine(f"field {key_field!r} is a {type(key).__name__}, not a str or an int")
    return key, value


def _report_bad_line(run: _Run, from_line: int) -> None:
    number = run.bad_line
    assert number is not None
    written = number - from_line
    lines = f" (lines {from_line}..{number - 1})" if written else ""
    say_error(
        f"line {number}: {run.problem}; wrote {written:,} events{lines}; fix line {number} "
        f"and continue with --from-line {number}"
    )


@contextmanager
def _opened(path: str) -> Iterator[Iterator[tuple[int, bytes]]]:
    """The numbered lines of `path` ("-": stdin), without their line ends."""
    if path == "-":
        yield _numbered(sys.stdin.buffer)
        return
    try:
        file = Path(path).open("rb")  # noqa: SIM115
    except OSError as error:
        raise InvalidArgument(f"{path}: cannot read: {error.strerror}") from None
    with file:
        yield _numbered(file)


def _numbered(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    return ((n, line.rstrip(b"\r\n")) for n, line in enumerate(source, start=1))
