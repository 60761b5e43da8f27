"""Structured logs of a rebalance node: one JSON object per line (spec_rebalance §9 "Logging").

Every line starts with `ts` (wall-clock time, ISO 8601 UTC with milliseconds, from the Clock),
`level` (DEBUG, INFO, WARNING or ERROR), `node`, `event` and `t_mono` (the Clock's monotonic
seconds; on one host the processes share it, so a bench can order events of different nodes),
then the event's fields. Events the node writes: `acquired`, `active`, `leader` /
`leader_lost`, `members`, `seeded`, `rotated` / `rebalance_failed`, `adopted`, `activated`,
`checkpoint` / `checkpoint_failed`, `leaving`, `draining`, `left`, `leave_timeout`, `fenced`,
`crashed`, `stopped`, `requests` (store request counters by purpose, when enabled) and `log` (a
forwarded record of the library's own `logging` output, at its level). The stream node adds
`progress` (runtime.node: the engine's figures when they moved), and `laminar-cluster node`
writes `refused`, `started` (the metrics endpoint) and `signal` (cli.node). `EVENT_LEVELS`
gives each event its level; every other event is INFO.

A problem that repeats (a WARNING or ERROR line equal to the previous one but for its timings)
is written once; its repeats are counted and reported as one `repeated` line (`of`, `count`,
`message`) when another problem comes, every `REPEAT_REPORT_S` while it lasts, and at `stopped`.
While a problem repeats it is the node's `problem` (None again after an event that shows
progress, `PROGRESS_EVENTS`), for health reporting. Secrets in a line are redacted
(`store.diagnose.redact_text`).
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Final, TextIO

from laminar_cluster.clock import Clock
from laminar_cluster.store.diagnose import redact_text

EVENT_LEVELS: Final = {
    "rebalance_failed": "WARNING",
    "checkpoint_failed": "WARNING",
    "leave_timeout": "WARNING",
    "fenced": "WARNING",
    "refused": "ERROR",
    "startup_failed": "ERROR",
    "crashed": "ERROR",
}
PROBLEM_LEVELS: Final = frozenset({"WARNING", "ERROR", "CRITICAL"})
PROGRESS_EVENTS: Final = frozenset({"checkpoint", "rotated", "adopted", "activated", "seeded"})
VOLATILE_FIELDS: Final = frozenset({"took_s", "attempt_s", "attempt_started", "after_s"})
REPEAT_REPORT_S: Final = 60.0


def iso_utc(wall_ms: int) -> str:
    """`wall_ms` as ISO 8601 UTC with milliseconds: `2026-12-02T03:49:51.123Z`."""
    moment = datetime.datetime.fromtimestamp(wall_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class NodeLog:
    """JSON lines on `stream`, flushed per line (a killed process loses no finished line)."""

    def __init__(self, stream: TextIO, clock: Clock, node: int) -> None:
        self._stream, self._clock, self.node = stream, clock, node
        self._last_problem: tuple[str, str] | None = None  # (event, signature)
        self._last_message = ""
        self._repeats = 0
        self._reported_s = 0.0
        self.problem: str | None = None

    def write(self, event: str, **fields: Any) -> None:
        """One line at the event's level (`EVENT_LEVELS`, else INFO)."""
        self.write_at(EVENT_LEVELS.get(event, "INFO"), event, **fields)

    def write_at(self, level: str, event: str, **fields: Any) -> None:
        """One line at `level`; a repeat of the previous problem is counted instead (module
        docstring)."""
        if level in PROBLEM_LEVELS:
            signature = json.dumps(
                {k: v for k, v in fields.items() if k not in VOLATILE_FIELDS},
                sort_keys=True,
                default=str,
            )
            if self._last_problem == (event, signature):
                self._repeats += 1
                self.problem = self._last_message
                if self._clock.monotonic() - self._reported_s >= REPEAT_REPORT_S:
                    self._report_repeats()
                return
            self._report_repeats()
            self._last_problem = (event, signature)
            self._last_message = _message(event, fields)
            self._reported_s = self._clock.monotonic()
        elif event in PROGRESS_EVENTS:
            self._report_repeats()
            self._last_problem, self.problem = None, None
        elif event == "stopped":
            self._report_repeats()
        self._emit(event, level, fields)

    def _report_repeats(self) -> None:
        if self._repeats and self._last_problem is not None:
            self._emit(
                "repeated",
                "WARNING",
                {
                    "of": self._last_problem[0],
                    "count": self._repeats,
                    "message": self._last_message,
                },
            )
        self._repeats = 0
        self._reported_s = self._clock.monotonic()

    def _emit(self, event: str, level: str, fields: dict[str, Any]) -> None:
        line = {
            "ts": iso_utc(self._clock.wall_ms()),
            "level": level,
            "node": self.node,
            "event": event,
            "t_mono": self._clock.monotonic(),
            **fields,
        }
        text = json.dumps(line, separators=(",", ":"), default=str)
        self._stream.write(redact_text(text) + "\n")
        self._stream.flush()


def _message(event: str, fields: dict[str, Any]) -> str:
    text = fields.get("message") or fields.get("error") or event
    return f"{event}: {text}" if event != "log" else str(text)


class JsonLogHandler(logging.Handler):
    """Forwards `logging` records to a NodeLog as `log` events at the record's level (one
    process per node only: the handler cannot tell which in-process node a record came
    from)."""

    def __init__(self, log: NodeLog, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log.write_at(
                record.levelname, "log", logger=record.name, message=record.getMessage()
            )
        except Exception:  # a logging handler must never raise into the caller
            self.handleError(record)
