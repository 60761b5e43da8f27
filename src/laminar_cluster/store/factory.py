"""Open a store from a URL.

| URL                                  | backend                                        |
|--------------------------------------|------------------------------------------------|
| `memory://`                          | a fresh in-memory store (one process only)     |
| `file:///abs/path[?fsync=false]`     | `FileStore`: one host, several processes       |
| `s3://bucket[/prefix][?key=value&…]` | obstore S3 (also S3-compatible servers)        |
| `gs://bucket[/prefix][?…]`           | obstore Google Cloud Storage                   |
| `az://container[/prefix][?…]`        | obstore Azure Blob Storage                     |

Query parameters of the cloud URLs are obstore configuration keys (`endpoint`, `region`,
`access_key_id`, ... for S3), except the HTTP client options `allow_http`, `timeout`,
`connect_timeout` and `allow_invalid_certificates`. Anything not given comes from the usual
environment variables (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `GOOGLE_SERVICE_ACCOUNT`, ...).
obstore's own retries are turned off: this project retries itself, with deadlines, and must see
every lost response (see `obstore_backend`).
"""

from __future__ import annotations

import datetime
import urllib.parse
from typing import Any

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store.api import ObjectStore
from laminar_cluster.store.diagnose import (
    StoreMisconfigured,
    explain,
    one_line,
    parse_file_url,
    redact_url,
)
from laminar_cluster.store.obstore_backend import ObstoreStore

_CLIENT_OPTIONS = {"allow_http", "timeout", "connect_timeout", "allow_invalid_certificates"}
_BOOLEAN_CLIENT_OPTIONS = {"allow_http", "allow_invalid_certificates"}
_NO_RETRIES: Any = {"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=30)}


def open_store(url: str) -> ObjectStore:
    """Open the store a URL names; raise InvalidArgument for a malformed or unknown URL."""
    parsed = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True, strict_parsing=False))
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        if parsed.netloc or parsed.path.strip("/") or query:
            raise InvalidArgument(f"{url}: memory:// takes no name, path or options")
        return ObstoreStore.memory()
    if scheme == "file":
        return _open_file(url, parsed, query)
    if scheme in ("s3", "gs", "az"):
        return _open_cloud(url, scheme, parsed, query)
    raise InvalidArgument(
        f"{url}: unknown store scheme {parsed.scheme!r}; use memory://, file:///abs/path, "
        "s3://bucket, gs://bucket or az://container"
    )


def _open_file(url: str, parsed: urllib.parse.SplitResult, query: dict[str, str]) -> ObjectStore:
    path, query = parse_file_url(url)  # strict: never another path than the one written
    unknown = set(query) - {"fsync"}
    if unknown:
        raise InvalidArgument(f"{url}: unknown file:// options {sorted(unknown)}; known: fsync")
    from laminar_cluster.store.file_backend import FileStore

    return FileStore(path, fsync=_boolean(url, "fsync", query.get("fsync", "true")))


def _open_cloud(
    url: str, scheme: str, parsed: urllib.parse.SplitResult, query: dict[str, str]
) -> ObjectStore:
    from obstore.store import AzureStore, GCSStore, S3Store

    bucket = parsed.netloc
    if not bucket:
        raise InvalidArgument(f"{url}: {scheme}:// needs a bucket or container name")
    prefix = parsed.path.strip("/") or None
    client_options: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for name, value in query.items():
        if name in _BOOLEAN_CLIENT_OPTIONS:
            client_options[name] = _boolean(url, name, value)
        elif name in _CLIENT_OPTIONS:
            client_options[name] = value
        else:
            config[name] = value
    store_class: Any = {"s3": S3Store, "gs": GCSStore, "az": AzureStore}[scheme]
    try:
        inner = store_class(
            bucket,
            prefix=prefix,
            config=config or None,
            client_options=client_options or None,
            retry_config=_NO_RETRIES,
        )
    except Exception as error:
        reason = explain(error, url) or one_line(error, url)
        raise StoreMisconfigured(f"{_redacted(url)}: {reason}") from error
    return ObstoreStore(inner, url=_redacted(url))


def _boolean(url: str, name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise InvalidArgument(f"{_redacted(url)}: option {name}={value!r} is not a boolean")


def _redacted(url: str) -> str:
    """The URL without secret query values, for messages and `ObjectStore.url`."""
    return redact_url(url)
