"""Record types: the schema allow-list, `Record`'s struct configuration, and msgspec facts."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

import msgspec
import pytest

from laminar_cluster.codec import (
    U64,
    Digest32,
    NonZeroU64,
    Record,
    check_record_type,
    decode,
    encode,
)
from laminar_cluster.errors import InvalidArgument

KEY = "control/types/v1.json"


class Inner(Record):
    node_id: NonZeroU64
    label: str | None = None


class Good(Record):
    version: Literal[2]
    count: U64 = 0
    boot_id: uuid.UUID
    digest: Digest32
    inner: Inner | None = None
    pairs: tuple[U64, str] = (0, "")
    labels: dict[str, list[Inner]] = {}


class FloatField(Record):
    version: Literal[1]
    ratio: float


class UnboundedInt(Record):
    version: Literal[1]
    n: int


class TooLowInt(Record):
    version: Literal[1]
    n: Annotated[int, msgspec.Meta(ge=-(2**63) - 1, le=5)]


class VersionSecond(Record):
    name: str
    version: Literal[1]


class VersionStr(Record):
    version: Literal["1"]


class IntKeys(Record):
    version: Literal[1]
    by_id: dict[U64, str]


class RawBytes(Record):
    version: Literal[1]
    blob: bytes


class AnyField(Record):
    version: Literal[1]
    value: Any


class SetField(Record):
    version: Literal[1]
    ids: frozenset[U64]


class Tagged(Record, tag=True):
    version: Literal[1]


class Omitting(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    x: U64 = 0


class Loose(msgspec.Struct):
    x: U64 = 0


class NestedOmitting(Record):
    version: Literal[1]
    inner: Omitting


class NestedLoose(Record):
    version: Literal[1]
    inner: list[Loose]


class NestedFloat(Record):
    version: Literal[1]
    inner: list[dict[str, tuple[U64, float] | None]]


class HugeBound(Record):
    version: Literal[1]
    n: Annotated[int, msgspec.Meta(ge=0, le=2**64 - 1)]


def test_a_good_record_type_passes_and_round_trips() -> None:
    check_record_type(Good)
    record = Good(version=2, boot_id=uuid.UUID(int=5), digest=(7,) * 32, inner=Inner(node_id=1))
    data = encode(record)
    assert data.startswith(
        b'{"version":2,"count":0,"boot_id":"00000000-0000-0000-0000-000000000005"'
    )
    assert decode(data, Good, key=KEY, max_bytes=4096) == record


@pytest.mark.parametrize(
    ("type_", "fact"),
    [
        (FloatField, "FloatField.ratio is a float; records hold no floats"),
        (UnboundedInt, "UnboundedInt.n is an int without a lower bound"),
        (TooLowInt, "don't fit in an int64"),
        (VersionSecond, "first field is not `version`"),
        (VersionStr, "`version` is not a Literal of ints"),
        (IntKeys, "IntKeys.by_id is a dict whose keys are not str"),
        (RawBytes, "BytesType"),
        (AnyField, "AnyType"),
        (SetField, "FrozenSetType"),
        (Tagged, "is tagged"),
        (NestedOmitting, "(Omitting) sets omit_defaults"),
        (NestedLoose, "NestedLoose.inner[] (Loose) does not set forbid_unknown_fields"),
        (NestedFloat, "NestedFloat.inner[]{}[1] is a float"),
        (HugeBound, "don't fit in an int64"),
        (dict, "is not a msgspec Struct"),
    ],
)
def test_record_types_without_a_canonical_form_are_refused(type_: type[Any], fact: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(fact)):
        check_record_type(type_)
    with pytest.raises(InvalidArgument, match=re.escape(fact)):
        decode(b"{}", type_, key=KEY, max_bytes=1024)


def test_record_config_is_inherited_and_kw_only_is_the_default() -> None:
    config = Good.__struct_config__
    assert (config.frozen, config.forbid_unknown_fields, config.omit_defaults) == (
        True,
        True,
        False,
    )
    assert Good.__struct_fields__[0] == "version"
    with pytest.raises(TypeError):
        Inner(1)  # type: ignore[call-arg]
    record = Inner(node_id=1)
    with pytest.raises(AttributeError):
        record.node_id = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "option",
    [{"omit_defaults": True}, {"array_like": True}, {"frozen": False},
     {"forbid_unknown_fields": False}],
)  # fmt: skip
def test_record_refuses_options_that_break_canonical_bytes(option: dict[str, bool]) -> None:
    with pytest.raises(TypeError, match="breaks canonical bytes"):
        type("Bad", (Record,), {"__annotations__": {"x": int}}, **option)


def test_msgspec_inherits_frozen_and_forbid_unknown_fields_but_not_kw_only() -> None:
    """Pins the msgspec behaviour that `Record`'s metaclass exists for (see codec/types.py)."""

    class Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
        pass

    class Sub(Base, frozen=True):
        a: int

    assert Sub.__struct_config__.frozen and Sub.__struct_config__.forbid_unknown_fields
    assert Sub(1).a == 1  # positional: kw_only did not carry over
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(b'{"a":1,"b":2}', type=Sub)


def test_msgspec_int_bounds_stop_at_int64_and_plain_ints_are_unbounded() -> None:
    """Pins why U64 has no `le` and the codec checks the 64-bit envelope itself."""
    with pytest.raises(ValueError, match="int64"):
        msgspec.json.Decoder(Annotated[int, msgspec.Meta(le=2**64 - 1)])
    assert msgspec.json.decode(b"99999999999999999999999", type=int) == 99999999999999999999999
