"""moto's standalone S3 server with every request serialized: `python -m tests.support.moto_serial`.

moto's threaded server checks `If-Match` and then writes without a lock in between, so on a busy
machine two conditional PUTs from the same version can both succeed (seen: two processes
allocated the same checkpoint ID). Real S3 makes conditional writes atomic. Holding one lock per
request restores that, at the cost of concurrency inside the test server only.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from moto import server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_LOCK = threading.Lock()
_original_call = DomainDispatcherApplication.__call__


def _serialized_call(self: DomainDispatcherApplication, environ: Any, start_response: Any) -> Any:
    with _LOCK:
        return list(_original_call(self, environ, start_response))


DomainDispatcherApplication.__call__ = _serialized_call  # type: ignore[method-assign]

if __name__ == "__main__":
    server.main(sys.argv[1:])
