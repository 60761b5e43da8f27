"""Where a file sink writes (docs/protocols/file-sink.md, "Targets"): its `url`, checked at
declaration.

| `url`                                   | target                                            |
|-----------------------------------------|---------------------------------------------------|
| None                                    | the cluster's own store (the `store` of `open`)   |
| `file:///abs/dir` or `/abs/dir`         | a plain local directory of plain files            |
| `s3://bucket[/prefix][?…]`, `gs://`, `az://` | a separate object store (`store.open_store`) |

A plain directory is not the cluster's `file://` store format: its files have no header, so
DuckDB, Polars and pandas read them in place. `memory://` is refused: each writer would open its
own empty store, so a restarted deliverer would find nothing it delivered.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Final

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store.diagnose import parse_file_url, redact_text, redact_url

STORE_SCHEMES: Final = frozenset({"s3", "gs", "az"})


def shown_url(url: str) -> str:
    """`url` for messages and logs: secret options as `***`."""
    return redact_url(url) if "://" in url else redact_text(url)


def sink_directory(url: str | None) -> str | None:
    """The plain directory `url` names; None if `url` is None (the cluster's store) or names a
    separate object store. InvalidArgument, saying what to write instead, for anything else."""
    if url is None:
        return None
    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"sink url must be a non-empty str or None, not {url!r}")
    if url.startswith("/"):
        return _plain_path(url)
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "file":
        path, query = parse_file_url(url)
        if query:
            raise InvalidArgument(
                f"sink url {shown_url(url)}: a plain directory takes no options; "
                f"write file://{urllib.parse.quote(path)}"
            )
        return _plain_path(path)
    if scheme in STORE_SCHEMES:
        if not urllib.parse.urlsplit(url).netloc:
            raise InvalidArgument(
                f"sink url {shown_url(url)} names no bucket; write {scheme}://bucket[/prefix]"
            )
        return None
    raise InvalidArgument(
        f"sink url {shown_url(url)}: scheme {scheme or 'none'!r} is no sink target; write "
        "file:///abs/dir (a plain directory) or s3://bucket, gs://bucket, az://container"
    )


def _plain_path(path: str) -> str:
    if "\x00" in path or path.rstrip("/") == "" or not os.path.isabs(path):
        raise InvalidArgument(
            f"sink directory {path!r} must be an absolute path other than /; write /abs/dir"
        )
    if {".", ".."} & set(path.split("/")):
        raise InvalidArgument(
            f"sink directory {path!r} has '.' or '..' segments; write {os.path.normpath(path)}"
        )
    return path.rstrip("/")
