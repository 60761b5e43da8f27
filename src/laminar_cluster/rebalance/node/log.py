"""Structured logs of a rebalance node: one JSON object per line (RB §9 "Logging").

Every line starts with `ts` (wall-clock time, ISO 8601 UTC with milliseconds, from the Clock),
`level` (DEBUG, INFO, WARNING or ERROR), `node`, `event` and `t_mono` (the Clock's monotonic
seconds; on one host the processes share it, so a bench can order events of different nodes),
then the event's fields. Events the node writes: `acquired`, `active`, `leader` /
`leader_lost`, `members`, `seeded`, `rotated` / `rebalance_failed`, `adopted`, `activated`,
`checkpoint` / `checkpoint_failed` / `checkpoints_quiet` (the first periodic checkpoint skipped
since the last one, DC-21), `leaving`, `draining`, `left`, `leave_timeout`, `fenced`, `crashed`,
`stopped`, `requests` (store request counters by purpose, when enabled) and `log` (a forwarded
record of the library's own `logging` output, at its level). The stream node adds
`progress` (runtime.node: the engine's figures when they moved), and `laminar-cluster node`
writes `refused`, `started` (the metrics endpoint) and `signal` (cli.node). `EVENT_LEVELS`
gives each event its level; every other event is INFO.

A problem (a WARNING or ERROR line) is written once: a line equal to one already written but
for its timings is counted instead, and the counts are reported as one `repeated` line per
problem (`of`, `count`, `message`) every `REPEAT_REPORT_S`, at the next event that shows
progress (`PROGRESS_EVENTS`, which also forgets the problems) and at `stopped`. While a problem
repeats it is the node's `problem` (None again after progress), for health reporting.
Secrets in a line are redacted (`store.diagnose.redact_text`).
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass
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
PROBLEMS_KEPT_MAX: Final = 64  # distinct problems remembered until progress is made


def iso_utc(wall_ms: int) -> str:
    """`wall_ms` as ISO 8601 UTC with milliseconds: `2026-12-02T03:49:51.123Z`."""
    moment = datetime.datetime.fromtimestamp(wall_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class _Problem:
    event: str
    message: str
    repeats: int = 0


class NodeLog:
    """JSON lines on `stream`, flushed per line (a killed process loses no finished line)."""

    def __init__(self, stream: TextIO, clock: Clock, node: int) -> None:
        self._stream, self._clock, self.node = stream, clock, node
        self._problems: dict[tuple[str, str], _Problem] = {}  # by (event, signature)
        self._reported_s = clock.monotonic()
        self.problem: str | None = None

    def write(self, event: str, **fields: Any) -> None:
        """One line at the event's level (`EVENT_LEVELS`, else INFO)."""
        self.write_at(EVENT_LEVELS.get(event, "INFO"), event, **fields)

    def write_at(self, level: str, event: str, **fields: Any) -> None:
        """One line at `level`; a repeat of a problem already written is counted instead
        (module docstring)."""
        if level in PROBLEM_LEVELS:
            signature = json.dumps(
                {k: v for k, v in fields.items() if k not in VOLATILE_FIELDS},
                sort_keys=True,
                default=str,
            )
            known = self._problems.get((event, signature))
            if known is not None:
                known.repeats += 1
                self.problem = known.message
                if self._clock.monotonic() - self._reported_s >= REPEAT_REPORT_S:
                    self._report_repeats()
                return
            if len(self._problems) >= PROBLEMS_KEPT_MAX:
                self._report_repeats()
                self._problems.clear()
            self._problems[(event, signature)] = _Problem(event, _message(event, fields))
        elif event in PROGRESS_EVENTS:
            self._report_repeats()
            self._problems.clear()
            self.problem = None
        elif event == "stopped":
            self._report_repeats()
        self._emit(event, level, fields)

    def _report_repeats(self) -> None:
        """One `repeated` line per problem repeated since the last report."""
        for problem in self._problems.values():
            if problem.repeats:
                fields = {"of": problem.event, "count": problem.repeats, "message": problem.message}
                self._emit("repeated", "WARNING", fields)
                problem.repeats = 0
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
