"""Structured logs of a rebalance node: one JSON object per line (spec_rebalance §9 "Logging").

Every line has `node`, `event` and `t_mono` (the Clock's monotonic seconds; on one host the
processes share it, so a bench can order events of different nodes) plus the event's fields.
Events the node writes: `acquired`, `active`, `leader` / `leader_lost`, `members`, `seeded`,
`rotated` / `rebalance_failed`, `adopted`, `activated`, `checkpoint` / `checkpoint_failed`,
`leaving`, `draining`, `left`, `leave_timeout`, `fenced`, `crashed`, `stopped`,
`requests` (store request counters by purpose, when enabled) and `log` (a forwarded warning of
the library's own `logging` output). The stream node adds `progress` (runtime.node: the
engine's figures when they moved), and `laminar-cluster node` writes `refused`, `started`
(the metrics endpoint) and `signal` (cli.node).
"""

from __future__ import annotations

import json
import logging
from typing import Any, TextIO

from laminar_cluster.clock import Clock


class NodeLog:
    """JSON lines on `stream`, flushed per line (a killed process loses no finished line)."""

    def __init__(self, stream: TextIO, clock: Clock, node: int) -> None:
        self._stream, self._clock, self.node = stream, clock, node

    def write(self, event: str, **fields: Any) -> None:
        line = {"node": self.node, "event": event, "t_mono": self._clock.monotonic(), **fields}
        self._stream.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
        self._stream.flush()


class JsonLogHandler(logging.Handler):
    """Forwards `logging` records to a NodeLog as `log` events (one process per node only: the
    handler cannot tell which in-process node a record came from)."""

    def __init__(self, log: NodeLog, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log.write(
                "log", level=record.levelname, logger=record.name, message=record.getMessage()
            )
        except Exception:  # a logging handler must never raise into the caller
            self.handleError(record)
