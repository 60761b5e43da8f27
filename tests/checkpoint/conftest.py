"""Fixtures for the decision store tests.

`shared_store_url` runs a test on memory, file and the S3 test server (NativeCas mode); each call
of `open_shared()` is a fresh DecisionStore instance (its own caches) on the same store, as a
second process would be. Local-mode tests use `local_root` with `DecisionStore.local_filesystem`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.store import ObjectStore


@pytest.fixture
def clock() -> Clock:
    return RealClock()


@pytest.fixture
def shared_store(make_store: Callable[[], ObjectStore]) -> ObjectStore:
    """One client of the parametrized store (memory, file or S3)."""
    return make_store()


@pytest.fixture
def open_shared(make_store: Callable[[], ObjectStore], clock: Clock) -> Callable[[], DecisionStore]:
    """Opens a fresh NativeCas DecisionStore instance (new client, empty caches) each call."""

    def open_() -> DecisionStore:
        return DecisionStore.shared(make_store(), clock=clock)

    return open_


@pytest.fixture
def local_root(tmp_path: Path) -> Path:
    return tmp_path / "local-decisions"


@pytest.fixture
def open_local(local_root: Path, clock: Clock) -> Callable[[], DecisionStore]:
    """Opens a fresh LocalSingleWriter DecisionStore on one local directory each call."""

    def open_() -> DecisionStore:
        return DecisionStore.local_filesystem(local_root, clock=clock, fsync=False)

    return open_


def deadline(clock: Clock, seconds: float = 30.0) -> float:
    return clock.monotonic() + seconds
