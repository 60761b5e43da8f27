"""Fixtures of the command-line tests.

`file_url` here names an existing, empty directory: the read-only views refuse a `file://`
directory that does not exist (issue 17: "no such directory" instead of an empty cluster), so
an empty store is an empty directory, as an operator's would be.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    root = tmp_path / "store"
    root.mkdir(exist_ok=True)
    return f"file://{root}?fsync=false"
