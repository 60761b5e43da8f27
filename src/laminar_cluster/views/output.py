"""Printing for the command line: rich tables for people, JSON for programs."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table

from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.diagnose import require_usable

T = TypeVar("T")
SHOW_WIDTH_MAX = 400  # columns: wider values fold at word boundaries

console = Console()
error_console = Console(stderr=True)


def show(renderable: RenderableType, *, to: Console | None = None) -> None:
    """Print `renderable` without breaking a value: as wide as it needs, even when that is
    wider than the console (a pipe is 80 columns), never cropped."""
    out = to or console
    unbounded = out.options.update(max_width=SHOW_WIDTH_MAX)
    needed = min(SHOW_WIDTH_MAX, Measurement.get(out, unbounded, renderable).maximum)
    if needed <= out.width:
        out.print(renderable)
        return
    wide = Console(
        file=out.file,
        width=needed,
        color_system=out.color_system,  # type: ignore[arg-type]
        force_terminal=out.is_terminal,
        no_color=out.no_color,
    )
    wide.print(renderable, crop=False)


def table(*columns: str, title: str | None = None, wrap: tuple[str, ...] = ()) -> Table:
    """A table whose cells never break mid-value: every column keeps its values on one line
    except those named in `wrap` (free text, folded at word boundaries)."""
    made = Table(title=title)
    for column in columns:
        made.add_column(column, no_wrap=column not in wrap, overflow="fold")
    return made


def cell(value: Any) -> str:
    """A value as a table shows it: never a Python repr (`None` is empty, booleans are
    yes/no, sequences are comma-separated)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(item) for item in value)
    if isinstance(value, int):
        return str(value)
    return str(value)


def say_problem(label: str, where: str | None, error: str) -> None:
    """One problem on one line, in red: `AUDIT FAILED <object>: <error>`."""
    console.print(f"{label} {where}: {error}", style="red", markup=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout, for `--json`."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


async def open_checked(url: str, *, must_exist: bool) -> ObjectStore:
    """The store at `url` after its first request (`store.diagnose`): StoreMisconfigured with
    one line when it cannot be used; `must_exist` for readers (an absent `file://` directory
    is then an error, not an empty cluster)."""
    store = open_store(url)
    try:
        await require_usable(store, url, must_exist=must_exist)
    except BaseException:
        await store.close()
        raise
    return store


def run_on_store(
    url: str,
    work: Callable[[ObjectStore], Awaitable[T]],
    *,
    must_exist: bool = False,
    diagnosed: bool = True,
) -> T:
    """Open the store at `url` (`open_checked`, unless not `diagnosed`: then `work` makes
    the first request itself), run `work` on it in a fresh event loop, and close the store."""

    async def main() -> T:
        if diagnosed:
            store = await open_checked(url, must_exist=must_exist)
        else:
            store = open_store(url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())
