"""The demo's live display (issue 7: "It shows progress and the live cluster view while it runs").

One rich `Live` region redrawn in place: the current phase and elapsed time, bars of the
events produced and committed, and the `laminar-cluster status` view (leader and token,
members, assignment, last committed checkpoint, total source lag) as last read. Phase lines are
printed above it as they happen, so they stay in the scrollback. On a console that is not a
terminal, Live draws only its last frame; the phase lines then make the record. `quiet` (the
`--json` mode) shows nothing.
"""

from __future__ import annotations

import dataclasses
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from laminar_cluster.views.status import StatusView
from laminar_cluster.views.status_render import render

BAR_WIDTH = 40


class DemoView:
    def __init__(self, console: Console, total_events: int, *, quiet: bool) -> None:
        self.console, self.total, self.quiet = console, total_events, quiet
        self.phase = "starting"
        self.produced = self.committed = 0
        self.elapsed_s = 0.0
        self.status: StatusView | None = None
        self._live: Live | None = None

    def __enter__(self) -> DemoView:
        if not self.quiet:
            self._live = Live(
                self._render(), console=self.console, auto_refresh=False, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.__exit__(kind, error, trace)
            self._live = None
            if not self.console.is_terminal:
                self.console.line()  # Live ends its last frame without one: the next line joined it

    def say(self, text: str, *, markup: bool = True) -> None:
        """A line above the live region (kept in the scrollback); `markup=False` for text
        that is not ours (node log lines hold brackets)."""
        if self.quiet:
            return
        self.console.print(text, soft_wrap=True, markup=markup, highlight=markup)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.say(f"[bold]{self.elapsed_s:6.1f} s[/bold]  {phase}")
        self.refresh()

    def update(
        self,
        *,
        elapsed_s: float,
        produced: int,
        committed: int,
        status: StatusView | None = None,
    ) -> None:
        self.elapsed_s, self.produced, self.committed = elapsed_s, produced, committed
        if status is not None:
            self.status = status
        self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)

    def _render(self) -> RenderableType:
        bars = Table.grid(padding=(0, 2))
        bars.add_column(style="bold")
        bars.add_column()
        bars.add_column(justify="right")
        for name, done in (("produced", self.produced), ("committed", self.committed)):
            bars.add_row(
                name,
                ProgressBar(total=max(self.total, 1), completed=done, width=BAR_WIDTH),
                f"{done:,} / {self.total:,} events",
            )
        header = Text.assemble(
            ("demo ", "bold"), (f"{self.elapsed_s:.1f} s  ", "dim"), (self.phase, "cyan")
        )
        parts: list[RenderableType] = [header, bars]
        if self.status is not None:  # the lag total is in the summary; no per-partition table
            compact = dataclasses.replace(self.status, lag={**self.status.lag, "partitions": []})
            parts.append(render(compact, compact=True))
        return Group(*parts)
