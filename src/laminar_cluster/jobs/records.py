"""Small pure helpers shared by the operators: events to records, snapshot keys, emit order."""

from __future__ import annotations

from typing import Any

import msgspec

from laminar_cluster.assignment.vnode import Key, encode_key
from laminar_cluster.errors import CorruptRecord


def as_record(output: Any) -> dict[str, Any]:
    """A step output as a record: a dict as it is, a msgspec Struct through `to_builtins`."""
    if type(output) is dict:
        return output
    if isinstance(output, msgspec.Struct):
        record = msgspec.to_builtins(output)
        if type(record) is dict:
            return record
    raise TypeError(f"step output {output!r} is a {type(output).__name__}; return dicts or Structs")


def as_builtins(event: Any) -> Any:
    """An event as JSON-able builtins (a dict as it is), for the late and dead-letter streams."""
    if type(event) is dict:
        return event
    try:
        return msgspec.to_builtins(event)
    except (TypeError, msgspec.EncodeError):
        return repr(event)


def check_key(key: Any) -> Key:
    """`key` if it is a valid key (str, bytes, int or tuple of them; not bool), else TypeError."""
    try:
        encode_key(key)
    except Exception as error:
        raise TypeError(f"key {key!r}: {error}") from None
    return key  # type: ignore[no-any-return]


def key_from_snapshot(value: Any, what: str) -> Key:
    """A key read back from msgpack (arrays become tuples); CorruptRecord if it is no key."""
    if type(value) is list:
        value = tuple(key_from_snapshot(item, what) for item in value)
    try:
        encode_key(value)
    except Exception as error:
        raise CorruptRecord(f"{what}: snapshot holds {value!r}, not a key: {error}") from None
    return value  # type: ignore[no-any-return]


def key_order(key: Key) -> bytes:
    """The sort key of `key` among keys of any type: its canonical encoding."""
    return encode_key(key)


def event_text(event: Any) -> str:
    """An event as one line of JSON text (its repr if it has none): the dead-letter stream's
    `event`, a str whatever the event was, so every dead letter has the same columns."""
    try:
        return msgspec.json.encode(as_builtins(event)).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(event)
