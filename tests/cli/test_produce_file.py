"""`laminar-cluster produce --file F --key FIELD`, run as a user runs it: JSON Lines into the
record log, a bad line stops it after the lines before it, `--from-line` continues."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import msgspec

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.store import open_store
from tests.cli.test_commands import COMMAND, run


def run_with_stdin(stdin_text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], input=stdin_text, capture_output=True, text=True, timeout=120
    )


def read_log(url: str) -> list[dict[str, object]]:
    async def main() -> list[dict[str, object]]:
        log = EventLog(open_store(url))
        deadline = RealClock().monotonic() + 60
        events = []
        for partition in range(256):
            got, _ = await log.read_records(partition, 0, 100_000, deadline=deadline)
            events += [msgspec.json.decode(event) for event in got]
        return events

    return asyncio.run(main())


def test_produce_file_stops_at_a_bad_line_and_continues_from_it(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    lines = [json.dumps({"user": f"u{i % 5}", "n": i}) for i in range(1, 21)]
    lines[11] = json.dumps({"user": 1.5, "n": 12})  # line 12: a key of a wrong type
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    first = run("produce", "--store", url, "--file", str(source), "--key", "user")
    assert first.returncode == 2
    assert first.stderr.strip() == (
        "error: line 12: field 'user' is a float, not a str or an int; wrote 11 events "
        "(lines 1..11); fix line 12 and continue with --from-line 12"
    )
    assert sorted(e["n"] for e in read_log(url)) == list(range(1, 12))
    lines[11] = json.dumps({"user": "u2", "n": 12})
    source.write_text("\n".join(lines) + "\n")
    again = run_with_stdin(
        source.read_text(),
        *("produce", "--store", url, "--file", "-", "--key", "user", "--from-line", "12"),
        "--json",
    )
    assert again.returncode == 0, again.stderr
    figures = json.loads(again.stdout)
    assert (figures["events"], figures["bad_line"]) == (9, None)
    assert sorted(e["n"] for e in read_log(url)) == list(range(1, 21))  # nothing twice


def test_produce_file_names_each_kind_of_bad_line(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    for line, problem in [
        ("[1, 2]", "line 1: a JSON list, not an object"),
        ('{"n": 1}', "line 1: no field 'user'"),
        ("{nope", "line 1: not JSON"),
    ]:
        source = tmp_path / "bad.jsonl"
        source.write_text(line + "\n")
        result = run("produce", "--store", url, "--file", str(source), "--key", "user")
        assert result.returncode == 2
        assert result.stderr.startswith(f"error: {problem}"), result.stderr
        assert "wrote 0 events; fix line 1 and continue with --from-line 1" in result.stderr


def test_produce_file_prints_progress_figures_and_needs_a_key(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store?fsync=false"
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(1_000)))
    result = run("produce", "--store", url, "--file", str(source), "--key", "id")
    assert result.returncode == 0, result.stderr
    assert "appended 1,000 events (" in result.stdout and "events/s" in result.stdout
    missing = run("produce", "--store", url, "--file", str(source))
    assert missing.returncode == 2
    assert "--file needs --key FIELD" in missing.stderr
