"""moto's standalone S3 server with every request serialized: `python -m tests.support.moto_serial`.

moto's threaded server checks `If-Match` and then writes without a lock in between, so on a busy
machine two conditional PUTs from the same version can both succeed (seen: two processes
allocated the same checkpoint ID). Real S3 makes conditional writes atomic. Holding one lock per
request restores that, at the cost of concurrency inside the test server only. The lock is
first come, first served: with a plain `threading.Lock` a lease renewal queued behind a
checkpoint's burst of partial writes could wait for any number of later requests.

Two shortcuts make each request cheaper without changing any answer (measured with
`python -m tests.support.s3_cost`; moto 5.2.5):

* Every request but `/moto-api` goes straight to moto's S3 application. moto's dispatcher
  otherwise searches every service's URL patterns per request to find S3.
* The listing's `LastModified` values are formatted by `datetime.fromisoformat` instead of
  botocore's general parser (dateutil), which cost about 0.4 ms of server CPU per listed key.
  Any value that is not an ISO 8601 string still goes through botocore's parser.
"""

from __future__ import annotations

import collections
import datetime
import sys
import threading
from typing import Any

from moto import server
from moto.core import serialize
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


class _FifoLock:
    """A lock handed to its waiters in arrival order."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._busy = False
        self._waiters: collections.deque[threading.Event] = collections.deque()

    def __enter__(self) -> None:
        with self._mutex:
            if not self._busy:
                self._busy = True
                return
            turn = threading.Event()
            self._waiters.append(turn)
        turn.wait()  # the releasing thread hands the lock over: still busy

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._busy = False


_LOCK = _FifoLock()
_original_call = DomainDispatcherApplication.__call__
_original_parse = serialize.parse_to_aware_datetime
_s3_app: Any = None


def _serialized_call(self: DomainDispatcherApplication, environ: Any, start_response: Any) -> Any:
    global _s3_app
    with _LOCK:
        if str(environ.get("PATH_INFO", "")).startswith("/moto-api"):
            return list(_original_call(self, environ, start_response))
        if _s3_app is None:
            _s3_app = create_backend_app("s3")
        return list(_s3_app(environ, start_response))


def _fast_aware_datetime(value: Any) -> datetime.datetime:
    if isinstance(value, str) and "T" in value:
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            return _original_parse(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    return _original_parse(value)


DomainDispatcherApplication.__call__ = _serialized_call  # type: ignore[method-assign]
serialize.parse_to_aware_datetime = _fast_aware_datetime  # type: ignore[attr-defined]

if __name__ == "__main__":
    server.main(sys.argv[1:])
