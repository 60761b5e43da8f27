"""A real S3-compatible server for tests: moto's standalone server in its own process.

moto 5.2.5 honours `If-None-Match: *` and `If-Match` and answers 412 on conflict, which is what
the conditional writes of this project need. It serves about 300 requests per second here. It is
started through `moto_serial`, which serializes requests: moto's own check-then-write is not
atomic under concurrency, where real S3's conditional writes are.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def url(self, bucket: str, prefix: str = "") -> str:
        """A store URL for obstore with everything it needs to reach this server."""
        path = f"/{prefix}" if prefix else ""
        return (
            f"s3://{bucket}{path}?endpoint={self.endpoint}&region={REGION}"
            f"&access_key_id={ACCESS_KEY}&secret_access_key={SECRET_KEY}&allow_http=true"
        )

    def create_bucket(self, bucket: str | None = None) -> str:
        bucket = bucket or f"test-{uuid.uuid4().hex[:16]}"
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.status
        return bucket


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_s3_server(*, start_timeout_s: float = 30.0) -> Iterator[S3Server]:
    """Start moto_server on 127.0.0.1 with a free port; stop it on exit."""
    port = _free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.moto_serial", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        cwd=_REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"moto server exited with {process.returncode} at start")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server on {endpoint} not up in {start_timeout_s} s"
                    ) from None
                time.sleep(0.1)
        yield S3Server(endpoint=endpoint)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":  # a server for benchmarks by hand: python -m tests.support.s3server
    with running_s3_server() as server:
        bucket = server.create_bucket("bench")
        print(server.url(bucket), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
