"""The snapshot of one `VnodeRun`: a versioned msgspec msgpack record.

    VnodeSnapshot = [version=1, fingerprint, watermark_ms, events, late_events, dead_letters,
                     steps, terminal]

`fingerprint` names the job and its operator shape (`Program.fingerprint`), so the snapshot of
another job, or of this job after its operators changed, is refused as `CorruptRecord`.
`steps[i]` is the msgpack of step i's per-key states as `[[key, state], ...]` (keys are
str, bytes, int or arrays for tuples; never map keys), decoded as the step's `state_type`.
`terminal` is the last operator's state (`jobs.terminals`: running totals, open windows or
sessions), also as `[key, ...]` pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import msgspec

from laminar_cluster.errors import CorruptRecord
from laminar_cluster.jobs.errors import StateNotEncodable
from laminar_cluster.jobs.records import key_from_snapshot

SNAPSHOT_VERSION: Final = 1

_Count = Annotated[int, msgspec.Meta(ge=0)]


class VnodeSnapshot(msgspec.Struct, array_like=True, forbid_unknown_fields=True, kw_only=True):
    """Everything a `VnodeRun` holds (see the module docstring)."""

    version: Literal[1]
    fingerprint: str
    watermark_ms: int | None
    events: _Count
    late_events: _Count
    dead_letters: _Count
    steps: list[bytes]
    terminal: Any


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(VnodeSnapshot)

_ENCODE_ERRORS: Final = (TypeError, ValueError, OverflowError, msgspec.EncodeError)


def encode_snapshot(snapshot: VnodeSnapshot) -> bytes:
    """The msgpack bytes of `snapshot`."""
    return _ENCODER.encode(snapshot)


def decode_snapshot(data: bytes, what: str) -> VnodeSnapshot:
    """The snapshot in `data`; CorruptRecord when it is not one."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise CorruptRecord(f"{what}: bytes are not a vnode snapshot: {error}") from None


def encode_states(states: Mapping[Any, Any], what: str) -> bytes:
    """The msgpack of `[[key, state], ...]`; StateNotEncodable naming the first bad key."""
    try:
        return _ENCODER.encode(list(states.items()))
    except _ENCODE_ERRORS:
        pass
    for key, state in states.items():
        try:
            _ENCODER.encode(state)
        except _ENCODE_ERRORS as error:
            raise StateNotEncodable(
                f"{what}: state of key {key!r} is a {type(state).__name__} msgspec cannot "
                f"encode ({error}); keep state to msgspec types (dict, list, int, Struct, ...)"
            ) from error
    raise StateNotEncodable(f"{what}: a key cannot be encoded; keys are str, bytes or int")


def state_decoder(state_type: Any) -> msgspec.msgpack.Decoder[list[tuple[Any, Any]]]:
    """The decoder of one step's `[[key, state], ...]` with states of `state_type`."""
    return msgspec.msgpack.Decoder(list[tuple[Any, state_type]])


def decode_states(
    data: bytes, decoder: msgspec.msgpack.Decoder[list[tuple[Any, Any]]], what: str
) -> dict[Any, Any]:
    """The per-key states in `data`; CorruptRecord when they do not decode as the state type."""
    try:
        pairs = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise CorruptRecord(
            f"{what}: step states do not decode as the state type: {error}"
        ) from None
    return {key_from_snapshot(key, what): state for key, state in pairs}
