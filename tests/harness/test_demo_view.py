"""The demo's live display on a console that is not a terminal (a log file, CI): its last frame
ends its line, so the next phase line starts on its own."""

from __future__ import annotations

import io

from rich.console import Console

from laminar_cluster.harness.demo_view import DemoView


def test_the_last_frame_ends_its_line_on_a_file() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80)
    with DemoView(console, 100, quiet=False) as view:
        view.update(elapsed_s=1.0, produced=50, committed=20)
    console.print("checking the committed output")
    lines = out.getvalue().splitlines()
    assert "checking the committed output" in lines
    assert any("20 / 100 events" in line for line in lines)
