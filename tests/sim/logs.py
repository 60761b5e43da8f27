"""The library's log records during a simulation: counted by message, never printed.

The nodes log every retried failure; thousands of runs would drown the output. A failing run
shows its most repeated warnings instead (a node stuck retrying the same step names the step).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator


class WarningCounter(logging.Handler):
    """Counts the library's warnings by message: a failing run shows its most repeated ones
    (a node stuck retrying the same step names the step)."""

    def __init__(self, counts: Counter[str]) -> None:
        super().__init__(logging.WARNING)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.name.rsplit('.', 1)[-1]}: {record.getMessage()[:600]}"] += 1


@contextlib.contextmanager
def counted_logs(counts: Counter[str]) -> Iterator[None]:
    """The nodes log every retried failure; thousands of runs would drown the output, so the
    library's records are counted here and not propagated."""
    root = logging.getLogger("laminar_cluster")
    level, propagate = root.level, root.propagate
    handler = WarningCounter(counts)
    root.setLevel(logging.WARNING)
    root.propagate = False
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        root.propagate = propagate
