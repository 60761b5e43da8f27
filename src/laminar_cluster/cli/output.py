"""Printing for the command line: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console()
error_console = Console(stderr=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout, for `--json`."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
