"""Store failures as one line that says what to do (issue 17 "Errors that say what to do").

A store that cannot be used shows itself at the first request, and the backends report what
their client library said: for obstore that is a Rust error with a debug dump, an XML body and,
without credentials, four attempts at the instance metadata service (169.254.169.254). This
module turns such a failure into one actionable line, and keeps secrets out of every line:

* `redact_url` / `redact_text`: the value of every secret-looking URL option
  (`secret_access_key`, `session_token`, ...) becomes `***`; the rest of the URL is kept as
  given (no re-encoding).
* `parse_file_url`: the strict reading of a `file://` URL. A space, a `#`, a control character
  or a `%` that is not a valid escape is refused with the URL to write instead, never silently
  percent-encoded into another path.
* `explain(error, url)`: the line for a failure, from the error and its causes (the backend
  raises its errors `from` the library's), or None when it is not a known case.
* `diagnose(store, url, must_exist=...)`: the first request, made on purpose: for `file://`
  the directory is checked (missing, or under a regular file), for the cloud stores one
  single-key LIST. Returns the line, or None when the store answered.

It only reads the store and never changes it.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import Final

from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.store.api import ObjectStore

SECRET_WORDS: Final = ("secret", "token", "password", "key", "sas", "credential", "signature")
DIAGNOSE_PREFIX: Final = "control/"
NO_CREDENTIALS: Final = (
    "no S3 credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or access_key_id=... in the URL"
)
PLACEHOLDERS: Final = frozenset({"...", "***"})  # shown as they are: no secret
_SECRET_OPTION = re.compile(
    r"(?P<name>[A-Za-z0-9_]*(?:"
    + "|".join(SECRET_WORDS)
    + r")[A-Za-z0-9_]*)=(?P<value>[^&\s'\"]+)",
    re.IGNORECASE,
)
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNKNOWN_KEY = re.compile(r"Configuration key: '([^']+)' is not valid for store '([^']+)'")
_XML_CODE = re.compile(r"<Code>([^<]+)</Code>(?:<Message>([^<]*)</Message>)?")
_STATUS = re.compile(r"status code: (\d{3})")
_URL_UNSAFE = frozenset(' #"<>\\^`{|}')


class StoreMisconfigured(InvalidArgument):
    """The store cannot be used as the URL names it (no such directory or bucket, no
    credentials, an unknown option, plain http without allow_http): fix the URL or the
    environment. The message is one line and holds no secret."""


def is_secret_option(name: str) -> bool:
    """A URL option whose value is never shown."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact_url(url: str) -> str:
    """`url` with the value of every secret option (and a password in the authority) as `***`;
    everything else exactly as given."""
    parsed = urllib.parse.urlsplit(url)
    netloc = parsed.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else netloc
    pieces = []
    for piece in parsed.query.split("&") if parsed.query else []:
        name, sep, _ = piece.partition("=")
        pieces.append(f"{name}=***" if sep and is_secret_option(name) else piece)
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc, query="&".join(pieces)))


def redact_text(text: str) -> str:
    """`text` with every `secret_option=value` pair's value as `***` (for error messages and
    log lines that may quote a URL)."""
    return _SECRET_OPTION.sub(
        lambda m: m.group(0) if m.group("value") in PLACEHOLDERS else f"{m.group('name')}=***",
        text,
    )


def parse_file_url(url: str) -> tuple[str, dict[str, str]]:
    """The directory and options of a `file:///abs/path[?fsync=...]` URL; InvalidArgument
    (naming the URL to write instead) for anything that would be read as another path."""
    bad = sorted({c for c in url if c in _URL_UNSAFE or ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        fixed = redact_text(urllib.parse.quote(url, safe=":/?&=%"))
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidArgument(
            f"{redact_text(url)}: a file: URL cannot hold {shown} as written; percent-encode it "
            f"({fixed}) or choose another directory name"
        )
    if _PERCENT.search(url):
        raise InvalidArgument(
            f"{redact_text(url)}: '%' must start an escape of two hex digits (write %25 for a "
            "literal '%')"
        )
    parsed = urllib.parse.urlsplit(url)
    if parsed.netloc not in ("", "localhost"):
        raise InvalidArgument(f"{url}: file:// URLs name a local path (file:///abs/path)")
    path = urllib.parse.unquote(parsed.path)
    if re.search(r"%2[Ff]|%00", parsed.path):
        raise InvalidArgument(f"{url}: an escaped '/' or NUL (%2F, %00) is not a directory name")
    if not path.startswith("/") or path == "/":
        raise InvalidArgument(f"{url}: file:// needs an absolute directory path other than /")
    query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
    return path, query


def file_root_problem(url: str, *, must_exist: bool) -> str | None:
    """Why the directory of a `file://` URL cannot be used: a regular file on its path, or (when
    `must_exist`) no such directory. None when it can."""
    path, _ = parse_file_url(url)
    shown = redact_text(url)
    if os.path.isdir(path):
        return None
    probe = path
    while probe not in ("", "/"):
        if os.path.lexists(probe) and not os.path.isdir(probe):
            what = "is a regular file" if os.path.isfile(probe) else "is not a directory"
            return (
                f"{shown}: {probe} {what}: a file:// store is a directory; choose a path "
                "whose every part is a directory (or absent)"
            )
        probe = os.path.dirname(probe)
    if must_exist:
        return (
            f"{shown}: no such directory {path}: nothing to read there; check the path (a "
            "node or `produce` creates it on first write)"
        )
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and its causes, innermost last, at most 8."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _option(url: str, name: str) -> str | None:
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True))
    return query.get(name)


def _endpoint(url: str) -> str:
    endpoint = _option(url, "endpoint") or _option(url, "aws_endpoint")
    return endpoint or os.environ.get("AWS_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") or ""


_UNREACHABLE: Final = (
    ("dns error", "its host name does not resolve"),
    ("Connection refused", "connection refused"),
    ("tcp connect error", "the TCP connection failed"),
    ("timed out", "the connection timed out"),
    ("error sending request", "the request could not be sent"),
)
_REFUSED_CREDENTIALS: Final = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
)


def explain(error: BaseException, url: str) -> str | None:
    """The one line for a known store failure (see the module docstring), or None."""
    text = "\n".join(str(part) for part in _chain(error))
    endpoint = _endpoint(url) or "the default endpoint"
    if "169.254.169.254" in text:
        return NO_CREDENTIALS
    unknown = _UNKNOWN_KEY.search(text)
    if unknown is not None:
        return (
            f"unknown {unknown.group(2)} option {unknown.group(1)!r} in the store URL (known: "
            "obstore's configuration keys such as endpoint, region, access_key_id, "
            "secret_access_key, and allow_http, timeout, connect_timeout)"
        )
    if "NoSuchBucket" in text:
        bucket = urllib.parse.urlsplit(url).netloc
        return f"bucket {bucket!r} does not exist at {endpoint}: create it or fix the bucket name"
    plain_http = "BadScheme" in text or "builder error" in text
    if plain_http and endpoint.startswith("http://"):
        return (
            f"endpoint {endpoint} is plain http: add allow_http=true to the store URL (or use "
            "an https endpoint)"
        )
    reason = next((reason for marker, reason in _UNREACHABLE if marker in text), None)
    if reason is not None:
        return (
            f"cannot reach the store endpoint {endpoint} ({reason}): check endpoint= in the URL "
            "and that the server is running"
        )
    code = next((code for code in _REFUSED_CREDENTIALS if code in text), None)
    if code is not None:
        return (
            f"the store refused the credentials ({code}): check access_key_id and "
            "secret_access_key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        )
    return None


def one_line(error: BaseException, url: str) -> str:
    """`explain`'s line, else the error's first line with an XML body reduced to its code and
    message; never a secret."""
    line = explain(error, url)
    if line is not None:
        return line
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    xml = _XML_CODE.search(text)
    if "<?xml" in first:
        first = first[: first.index("<?xml")].rstrip(" :")
    if xml is not None:
        status = _STATUS.search(text)
        answer = f"{status.group(1)} " if status else ""
        message = f": {xml.group(2)}" if xml.group(2) else ""
        first = f"{first} (the store answered {answer}{xml.group(1)}{message})"
    return redact_text(first)


async def diagnose(store: ObjectStore, url: str, *, must_exist: bool) -> str | None:
    """Make the first request on purpose and explain a failure (module docstring): the line,
    or None when the store answered. `must_exist`: a `file://` directory that is absent is a
    problem (readers), not a store to create (writers)."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "file":
        return file_root_problem(url, must_exist=must_exist)
    if scheme == "memory":
        return None
    try:
        await store.list(DIAGNOSE_PREFIX, limit=1)
    except LaminarError as error:
        return one_line(error, url)
    return None


async def require_usable(store: ObjectStore, url: str, *, must_exist: bool) -> None:
    """`diagnose`, raising StoreMisconfigured with its line."""
    problem = await diagnose(store, url, must_exist=must_exist)
    if problem is not None:
        raise StoreMisconfigured(problem)
