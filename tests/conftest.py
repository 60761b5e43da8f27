"""Shared fixtures: stores of every backend, and the real S3 and PostgreSQL test servers. The
simulation's fast seeds start running in the background as soon as collection ends
(`tests.sim.ahead`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from laminar_cluster.store import ObjectStore, open_store
from tests.sim import ahead as sim_ahead
from tests.support.postgres import MISSING_SERVER, running_postgres, server_bin_dir
from tests.support.s3server import S3Server, running_s3_server

BACKENDS = ("memory", "file", "s3")
FAST_SEED_TEST = ("tests.sim.test_simulation", "test_seed")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected simulation seeds now, at idle priority, so they run while the rest
    of the suite does (the `ahead` fixture of `tests/sim/test_simulation.py` collects them)."""
    if session.config.option.collectonly:
        return
    seeds = [
        item.callspec.params["seed"]
        for item in session.items
        if isinstance(item, pytest.Function)
        and (item.module.__name__, item.originalname) == FAST_SEED_TEST
    ]
    if seeds:
        sim_ahead.start(seeds)


def pytest_sessionfinish(session: pytest.Session) -> None:
    sim_ahead.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's standalone S3 server on 127.0.0.1, one per test session."""
    with running_s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A private PostgreSQL server on 127.0.0.1 (tests.support.postgres), one per test session;
    its DSN. Fails, never skips, where the server binaries are missing (`make postgres`)."""
    if server_bin_dir() is None:
        pytest.fail(MISSING_SERVER)
    with running_postgres() as dsn:
        yield dsn


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A URL of a fresh bucket on the S3 test server."""
    return s3_server.url(s3_server.create_bucket())


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?fsync=false"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "s3":
        request.applymarker(pytest.mark.s3)
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh, empty store of the parametrized backend."""
    if backend == "memory":
        return "memory://"
    if backend == "file":
        return f"file://{tmp_path / 'store'}?fsync=false"
    server: S3Server = request.getfixturevalue("s3_server")
    return server.url(server.create_bucket(), prefix=f"p-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def make_store(store_url: str) -> Callable[[], ObjectStore]:
    """Opens another client of the same store (for memory://, the same object)."""
    first = open_store(store_url)

    def make() -> ObjectStore:
        return first if store_url == "memory://" else open_store(store_url)

    return make


@pytest.fixture
def store(make_store: Callable[[], ObjectStore]) -> ObjectStore:
    return make_store()
