"""Every coordinator test runs on memory:// and on file://."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["memory", "file"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"file://{tmp_path / 'store'}?fsync=false"
