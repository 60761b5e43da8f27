"""A plain HTTP GET for the tests that read a node's `/metrics`, `/livez` and `/readyz`."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_get(url: str, *, timeout_s: float = 5.0) -> tuple[int, str]:
    """The status and body of a GET of `url`, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
