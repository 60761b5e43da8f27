"""Printing for the command line: rich tables for people, JSON for programs."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rich.console import Console

from laminar_cluster.store import ObjectStore, open_store

T = TypeVar("T")

console = Console()
error_console = Console(stderr=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout, for `--json`."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def run_on_store(url: str, work: Callable[[ObjectStore], Awaitable[T]]) -> T:
    """Open the store at `url`, run `work` on it in a fresh event loop, and close the store."""

    async def main() -> T:
        store = open_store(url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())
