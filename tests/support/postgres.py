"""A real PostgreSQL server for tests: Debian's `postgresql` package, a private cluster.

`running_postgres()` runs initdb into a fresh temporary directory and starts `postgres` on a
free loopback port (unix sockets in the same directory, trust authentication, `fsync=off`),
yields its DSN, and stops the server (fast shutdown) and removes the directory on exit.
initdb and postgres refuse to run as root: as root (CI), both run as the `postgres` OS user
that the Debian package creates, and the directory is handed to it. `make postgres` installs
the package where it is missing; without it the fixture fails, it never skips.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

BINARIES_GLOB = "/usr/lib/postgresql/*/bin/initdb"
OS_USER = "postgres"
MISSING_SERVER = (
    f"PostgreSQL server binaries not found ({BINARIES_GLOB}): run `make postgres` "
    "(installs Debian's postgresql package)"
)


def server_bin_dir() -> Path | None:
    """The bin directory of the newest installed PostgreSQL major version, None if none."""
    found = sorted(glob.glob(BINARIES_GLOB), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user() -> dict[str, object]:
    """Popen arguments that drop root to the `postgres` user (no-op for other users)."""
    if os.geteuid() != 0:
        return {}
    return {"user": OS_USER, "group": OS_USER, "extra_groups": []}


def _initdb(bin_dir: Path, data_dir: Path, log: Path) -> None:
    command = [
        str(bin_dir / "initdb"),
        *("-D", str(data_dir), "-U", "postgres", "--auth=trust"),
        *("-E", "UTF8", "--locale=C", "--no-sync"),
    ]
    with log.open("ab") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, check=False, **_as_server_user()
        )
    if done.returncode != 0:
        raise RuntimeError(f"initdb exited with {done.returncode}:\n{log.read_text()[-2000:]}")


def _start(bin_dir: Path, base: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        str(bin_dir / "postgres"),
        *("-D", str(base / "data"), "-p", str(port), "-k", str(base), "-h", "127.0.0.1"),
        *("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
        *("-c", "max_connections=50", "-c", "shared_buffers=32MB"),
    ]
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **_as_server_user())


def _wait_ready(process: subprocess.Popen[bytes], dsn: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"postgres exited with {process.returncode} at start:\n{log.read_text()[-2000:]}"
            )
        try:
            with psycopg.connect(dsn, connect_timeout=2) as connection:
                connection.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres not up in {timeout_s} s") from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT: abort clients' transactions, then exit); kill after 10 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def running_postgres(*, start_timeout_s: float = 30.0) -> Iterator[str]:
    """A private PostgreSQL server on 127.0.0.1; yields its DSN. Stopped and removed on exit."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError(MISSING_SERVER)
    base = Path(tempfile.mkdtemp(prefix="laminar-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(base, OS_USER, OS_USER)
        log = base / "server.log"
        log.touch()
        _initdb(bin_dir, base / "data", log)
        port = _free_port()
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        process = _start(bin_dir, base, port, log)
        try:
            _wait_ready(process, dsn, log, start_timeout_s)
            yield dsn
        finally:
            _stop(process)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":  # a server by hand: python -m tests.support.postgres
    with running_postgres() as server_dsn:
        print(server_dsn, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
