"""Canonical JSON records: round trips, json.dumps equality, and rejection of every other form."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.codec import (
    I64,
    U16,
    U32,
    U64,
    Digest32,
    NonZeroU64,
    Record,
    decode,
    decode_sorted,
    encode,
    encode_checked,
    encode_sorted,
    encode_sorted_checked,
)
from laminar_cluster.codec.types import I64_MAX, I64_MIN, U16_MAX, U32_MAX, U64_MAX
from laminar_cluster.errors import CorruptRecord, InvalidArgument

KEY = "control/sample/v1.json"
MAX = 64 * 1024
EXAMPLES = settings(max_examples=150, deadline=None)
MUTATIONS = settings(max_examples=100, deadline=None)


class Owner(Record):
    node_id: NonZeroU64
    boot_id: uuid.UUID
    process_term: U64


class Sample(Record):
    version: Literal[3]
    name: str
    count: U64
    delta: I64
    port: U16
    size: U32
    flag: bool
    items: list[U32]
    digest: Digest32
    labels: dict[str, U64]
    owner: Owner | None = None
    note: str | None = None
    tail: U64 | None = None


class Text(Record):
    version: Literal[1]
    text: str


class Participant(Record):
    node_id: NonZeroU64
    manifest_sha256: str


class Capsule(Record):
    version: Literal[5]
    zeta: U64
    participants: list[Participant]
    offsets: dict[str, dict[str, I64]]
    alpha: str | None = None


u64s = st.integers(0, U64_MAX)
i64s = st.integers(I64_MIN, I64_MAX)
u32s = st.integers(0, U32_MAX)
owners = st.builds(Owner, node_id=st.integers(1, U64_MAX), boot_id=st.uuids(), process_term=u64s)
samples = st.builds(
    Sample,
    version=st.just(3),
    name=st.text(),
    count=u64s,
    delta=i64s,
    port=st.integers(0, U16_MAX),
    size=u32s,
    flag=st.booleans(),
    items=st.lists(u32s, max_size=5),
    digest=st.binary(min_size=32, max_size=32).map(tuple),
    labels=st.dictionaries(st.text(max_size=6), u64s, max_size=4),
    owner=st.none() | owners,
    note=st.none() | st.text(max_size=10),
    tail=st.none() | u64s,
)
capsules = st.builds(
    Capsule,
    version=st.just(5),
    zeta=u64s,
    participants=st.lists(
        st.builds(Participant, node_id=st.integers(1, U64_MAX), manifest_sha256=st.text()),
        max_size=3,
    ),
    offsets=st.dictionaries(
        st.text(max_size=5), st.dictionaries(st.text(max_size=5), i64s, max_size=3), max_size=3
    ),
    alpha=st.none() | st.text(max_size=8),
)

BASE = Sample(
    version=3,
    name="é/\x7f",
    count=1,
    delta=-1,
    port=2,
    size=3,
    flag=True,
    items=[4, 5],
    digest=tuple(range(32)),
    labels={"b": 2, "a": 1},
    owner=Owner(
        node_id=7, boot_id=uuid.UUID("0190c1e2-0000-7000-8000-000000000abc"), process_term=9
    ),
)


def _plain(value: Any, *, sort_fields: bool = False) -> Any:
    """`value` as builtins in the order the spec states, built without msgspec."""
    if isinstance(value, msgspec.Struct):
        items = [(name, getattr(value, name)) for name in value.__struct_fields__]
        if sort_fields:
            items.sort()
        return {name: _plain(v, sort_fields=sort_fields) for name, v in items}
    if isinstance(value, dict):
        return {k: _plain(v, sort_fields=sort_fields) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v, sort_fields=sort_fields) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    text = json.dumps(value, sort_keys=sort_keys, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def _rejected(data: bytes, type_: type[Any] = Sample, *, sorted_keys: bool = False) -> str:
    """Assert that `data` is rejected as a CorruptRecord naming KEY; return the message."""
    with pytest.raises(CorruptRecord) as caught:
        (decode_sorted if sorted_keys else decode)(data, type_, key=KEY, max_bytes=MAX)
    assert caught.value.key == KEY
    message = str(caught.value)
    assert message.startswith(f"{KEY}: ")
    return message


# ---- (a) round trips and the json.dumps form -----------------------------------------------


@EXAMPLES
@given(samples)
def test_round_trip_and_json_dumps_form(record: Sample) -> None:
    data = encode(record)
    assert data == _dumps(_plain(record))
    value = decode(data, Sample, key=KEY, max_bytes=MAX)
    assert value == record
    assert encode(value) == data
    assert encode_checked(record, what=KEY, max_bytes=MAX) == data


@EXAMPLES
@given(capsules)
def test_sorted_round_trip_and_json_dumps_form(capsule: Capsule) -> None:
    data = encode_sorted(capsule)
    assert data == _dumps(_plain(capsule, sort_fields=True), sort_keys=True)
    assert data == _dumps(msgspec.to_builtins(capsule), sort_keys=True)
    assert data == msgspec.json.encode(msgspec.to_builtins(capsule), order="sorted")
    value = decode_sorted(data, Capsule, key=KEY, max_bytes=MAX)
    assert value == capsule
    assert encode_sorted(value) == data
    assert encode_sorted_checked(capsule, what=KEY, max_bytes=MAX) == data


@EXAMPLES
@given(st.text())
def test_any_text_is_written_as_json_dumps_writes_it(text: str) -> None:
    record = Text(version=1, text=text)
    assert encode(record) == _dumps({"version": 1, "text": text})
    assert decode(encode(record), Text, key=KEY, max_bytes=MAX) == record


def test_escapes_of_every_ascii_character_and_some_others() -> None:
    chars = [chr(c) for c in range(0x80)]
    chars += ["\x80", "\xff", "é", "\u2028", "\u2029", "\ufeff", "\uffff", "😀", "\U0010ffff"]
    for ch in chars:
        assert encode(Text(version=1, text=ch)) == _dumps({"version": 1, "text": ch}), repr(ch)
    data = encode(Text(version=1, text='\b\f\n\r\t\x00\x01\x1f\x7f/"\\é'))
    assert (
        data == b'{"version":1,"text":"\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\x7f/\\"\\\\\xc3\xa9"}'
    )


def test_nulls_are_written_and_declaration_order_kept() -> None:
    data = encode(BASE)
    assert data.startswith(b'{"version":3,"name":')
    assert data.endswith(b'"note":null,"tail":null}')
    assert b'"labels":{"a":1,"b":2}' in data  # map keys sorted, struct fields not


@EXAMPLES
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_rejected_or_canonical(data: bytes) -> None:
    try:
        value = decode(data, Sample, key=KEY, max_bytes=MAX)
    except CorruptRecord as error:
        assert error.key == KEY
    else:
        assert encode(value) == data


@EXAMPLES
@given(samples, st.data())
def test_a_changed_byte_is_rejected_or_canonical(record: Sample, draw: st.DataObject) -> None:
    data = bytearray(encode(record))
    at = draw.draw(st.integers(0, len(data) - 1))
    data[at] = draw.draw(st.integers(0, 255))
    try:
        value = decode(bytes(data), Sample, key=KEY, max_bytes=MAX)
    except CorruptRecord:
        return
    assert encode(value) == bytes(data)


# ---- (b) every non-canonical form of a valid record is rejected ----------------------------


class _Obj(list[tuple[str, Any]]):
    """A JSON object as its list of (key, value) pairs, in the order read."""


def _model(data: bytes) -> Any:
    return json.loads(data, object_pairs_hook=_Obj)


def _tokens(node: Any) -> list[str]:
    if isinstance(node, _Obj):
        out = ["{"]
        for i, (key, value) in enumerate(node):
            out += ([","] if i else []) + [json.dumps(key, ensure_ascii=False), ":"]
            out += _tokens(value)
        return [*out, "}"]
    if isinstance(node, list):
        out = ["["]
        for i, value in enumerate(node):
            out += ([","] if i else []) + _tokens(value)
        return [*out, "]"]
    return [json.dumps(node, ensure_ascii=False)]


def _objects(node: Any) -> list[_Obj]:
    found: list[_Obj] = []
    if isinstance(node, _Obj):
        found.append(node)
        for _, value in node:
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


def _render(node: Any) -> bytes:
    return "".join(_tokens(node)).encode("utf-8")


def _pick(draw: st.DataObject, items: list[Any]) -> Any:
    assert items
    return items[draw.draw(st.integers(0, len(items) - 1))]


@MUTATIONS
@given(samples)
def test_token_model_renders_the_canonical_bytes(record: Sample) -> None:
    data = encode(record)
    assert _render(_model(data)) == data


@MUTATIONS
@given(samples, st.data())
def test_whitespace_anywhere_is_rejected(record: Sample, draw: st.DataObject) -> None:
    tokens = _tokens(_model(encode(record)))
    at = draw.draw(st.integers(0, len(tokens)))
    tokens.insert(at, draw.draw(st.sampled_from([" ", "\t", "\n", "\r", "\r\n", "  "])))
    assert "not its canonical encoding" in _rejected("".join(tokens).encode("utf-8"))


@MUTATIONS
@given(samples, st.data())
def test_reordered_keys_are_rejected(record: Sample, draw: st.DataObject) -> None:
    model = _model(encode(record))
    obj = _pick(draw, [o for o in _objects(model) if len(o) >= 2])
    i = draw.draw(st.integers(0, len(obj) - 2))
    j = draw.draw(st.integers(i + 1, len(obj) - 1))
    obj[i], obj[j] = obj[j], obj[i]
    _rejected(_render(model))


@MUTATIONS
@given(samples, st.data())
def test_duplicated_keys_are_rejected(record: Sample, draw: st.DataObject) -> None:
    model = _model(encode(record))
    obj = _pick(draw, [o for o in _objects(model) if o])
    pair = _pick(draw, list(obj))
    obj.insert(draw.draw(st.integers(0, len(obj))), pair)
    _rejected(_render(model))


@MUTATIONS
@given(samples, st.data())
def test_unknown_fields_are_rejected(record: Sample, draw: st.DataObject) -> None:
    model = _model(encode(record))
    structs = [model] + [value for name, value in model if name == "owner" and value]
    obj = _pick(draw, structs)
    name = draw.draw(st.sampled_from(["unknown", "Version", "nodeId", "ç"]))
    obj.insert(draw.draw(st.integers(0, len(obj))), (name, draw.draw(st.sampled_from([0, None]))))
    assert "unknown field" in _rejected(_render(model))


@MUTATIONS
@given(samples, st.data())
def test_dropped_null_fields_are_rejected(record: Sample, draw: st.DataObject) -> None:
    record = msgspec.structs.replace(record, tail=None)
    model = _model(encode(record))
    nulls = [i for i, (_, value) in enumerate(model) if value is None]
    del model[_pick(draw, nulls)]
    assert "not its canonical encoding" in _rejected(_render(model))


@MUTATIONS
@given(samples, st.data())
def test_escaped_non_ascii_is_rejected(record: Sample, draw: st.DataObject) -> None:
    extra = draw.draw(st.characters(min_codepoint=0x80, exclude_categories=["Cs"]))
    record = msgspec.structs.replace(record, name=record.name + extra)
    tokens = _tokens(_model(encode(record)))
    strings = [i for i, t in enumerate(tokens) if t.startswith('"') and not t.isascii()]
    at = _pick(draw, strings)
    tokens[at] = json.dumps(json.loads(tokens[at]))  # ensure_ascii: \u00e9, surrogate pairs
    assert "not its canonical encoding" in _rejected("".join(tokens).encode("utf-8"))


@MUTATIONS
@given(samples)
def test_trailing_newline_is_rejected(record: Sample) -> None:
    assert "not its canonical encoding" in _rejected(encode(record) + b"\n")


@MUTATIONS
@given(samples, st.data())
def test_int_written_as_float_is_rejected(record: Sample, draw: st.DataObject) -> None:
    tokens = _tokens(_model(encode(record)))
    at = _pick(draw, [i for i, t in enumerate(tokens) if re.fullmatch(r"-?[0-9]+", t)])
    tokens[at] += draw.draw(st.sampled_from([".0", "e0", "E0", ".0e0", "e+0"]))
    assert "float" in _rejected("".join(tokens).encode("utf-8"))


@MUTATIONS
@given(samples, st.data())
def test_int_written_as_bool_is_rejected(record: Sample, draw: st.DataObject) -> None:
    tokens = _tokens(_model(encode(record)))
    at = _pick(draw, [i for i, t in enumerate(tokens) if re.fullmatch(r"-?[0-9]+", t)])
    tokens[at] = draw.draw(st.sampled_from(["true", "false"]))
    _rejected("".join(tokens).encode("utf-8"))


# ---- direct cases ----------------------------------------------------------------------------


def _base_with(old: bytes, new: bytes) -> bytes:
    data = encode(BASE)
    assert data.count(old) == 1, old
    return data.replace(old, new)


def test_oversized_body_is_rejected_before_parsing() -> None:
    huge = b"[" * 10_000_000  # not JSON at all: a parse would report that instead
    with pytest.raises(CorruptRecord) as caught:
        decode(huge, Sample, key=KEY, max_bytes=1024)
    assert str(caught.value) == f"{KEY}: record is 10000000 bytes; maximum is 1024"
    assert caught.value.key == KEY


def test_size_limit_is_inclusive() -> None:
    data = encode(BASE)
    assert decode(data, Sample, key=KEY, max_bytes=len(data)) == BASE
    with pytest.raises(CorruptRecord, match=rf"is {len(data)} bytes; maximum is {len(data) - 1}"):
        decode(data, Sample, key=KEY, max_bytes=len(data) - 1)


def test_empty_body_is_rejected() -> None:
    assert _rejected(b"") == f"{KEY}: record is empty"


@pytest.mark.parametrize(
    ("old", "new", "fact"),
    [
        (b'"version":3', b'"version":4', "Invalid enum value 4"),
        (b'"version":3', b'"version":"3"', "version"),
        (b'"count":1', b'"count":-1', ">= 0"),
        (b'"count":1', b'"count":18446744073709551616', "outside the 64-bit range"),
        (b'"tail":null', b'"tail":99999999999999999999999', "outside the 64-bit range"),
        (b'"delta":-1', b'"delta":-9223372036854775809', ">= -9223372036854775808"),
        (b'"port":2', b'"port":65536', "<= 65535"),
        (b'"size":3', b'"size":4294967296', "<= 4294967295"),
        (b'"node_id":7', b'"node_id":0', ">= 1"),
        (b'"count":1', b'"count":1.0', "got `float`"),
        (b'"count":1', b'"count":1e2', "got `float`"),
        (b'"count":1', b'"count":true', "got `bool`"),
        (b'"flag":true', b'"flag":1', "got `int`"),
        (b'"items":[4,5]', b'"items":[4,null]', "got `null`"),
        (b'"digest":[0,', b'"digest":[', "length >= 32"),
        (b'"digest":[0,', b'"digest":[256,', "<= 255"),
        (b'"name":"', b'"extra":1,"name":"', "unknown field `extra`"),
        (b'"flag":true,', b"", "missing required field `flag`"),
        (b'"name":"\xc3\xa9', b'"name":"\\ud800', "not valid JSON"),
        (b'"name":"\xc3\xa9', b'"name":"\\udc00', "not valid JSON"),
        (b'"name":"\xc3\xa9', b'"name":"\\u00e9', "not its canonical encoding"),
        (b'"name":"\xc3\xa9', b'"name":"\\u00E9', "not its canonical encoding"),
        (b'"name":"\xc3\xa9/', b'"name":"\xc3\xa9\\/', "not its canonical encoding"),
        (b'"name":"\xc3\xa9', b'"name":"\xff', "not valid UTF-8 at byte 21"),
        (b'"name":"\xc3\xa9', b'"name":"\xc0\xa9', "not valid UTF-8"),
        (b'"name":"\xc3\xa9', b'"name":"\xed\xa0\x80', "not valid UTF-8"),
        (b'"delta":-1', b'"delta":-0', "not its canonical encoding"),
        (b'"count":1', b'"count":01', "not valid JSON"),
        (b"0190c1e2-0000-7000-8000-000000000abc", b"0190C1E2-0000-7000-8000-000000000ABC", "not"),
        (b"0190c1e2-0000-7000-8000-000000000abc", b"0190c1e2000070008000000000000abc", "not"),
        (b'"labels":{"a":1,"b":2}', b'"labels":{"b":2,"a":1}', "not its canonical encoding"),
        (b'"labels":{"a":1,"b":2}', b'"labels":{"a":1,"a":1,"b":2}', "not its canonical"),
        (b'"count":1', b'"count":1,"count":1', "not its canonical encoding"),
    ],
)
def test_direct_rejections(old: bytes, new: bytes, fact: str) -> None:
    assert fact in _rejected(_base_with(old, new))


def test_u64_and_i64_bounds_are_accepted() -> None:
    record = msgspec.structs.replace(BASE, count=U64_MAX, delta=I64_MIN, tail=0)
    assert decode(encode(record), Sample, key=KEY, max_bytes=MAX) == record
    record = msgspec.structs.replace(BASE, count=0, delta=I64_MAX)
    assert decode(encode(record), Sample, key=KEY, max_bytes=MAX) == record


def test_msgspec_keeps_the_last_duplicate_silently_and_decode_rejects_it() -> None:
    data = _base_with(b'"count":1', b'"count":5,"count":1')
    assert msgspec.json.decode(data, type=Sample, strict=True) == BASE  # msgspec: last one wins
    assert "not its canonical encoding" in _rejected(data)


def test_sorted_family_rejects_declaration_order_and_vice_versa() -> None:
    capsule = Capsule(version=5, zeta=1, participants=[], offsets={"s": {"b": 1, "a": -2}})
    sorted_data, control_data = encode_sorted(capsule), encode(capsule)
    assert sorted_data == (
        b'{"alpha":null,"offsets":{"s":{"a":-2,"b":1}},"participants":[],"version":5,"zeta":1}'
    )
    assert control_data.startswith(b'{"version":5,"zeta":1,')
    _rejected(control_data, Capsule, sorted_keys=True)
    _rejected(sorted_data, Capsule)
    _rejected(sorted_data.replace(b",", b", ", 1), Capsule, sorted_keys=True)
    message = _rejected(b"{" * (MAX + 1), Capsule, sorted_keys=True)
    assert message == f"{KEY}: record is {MAX + 1} bytes; maximum is {MAX}"


# ---- writing ---------------------------------------------------------------------------------


def test_encode_checked_refuses_oversized_records_before_writing() -> None:
    size = len(encode(BASE))
    with pytest.raises(InvalidArgument) as caught:
        encode_checked(BASE, what=KEY, max_bytes=size - 1)
    assert str(caught.value) == f"{KEY}: record is {size} bytes; maximum is {size - 1}"
    with pytest.raises(InvalidArgument, match="maximum is 10"):
        encode_sorted_checked(Capsule(version=5, zeta=1, participants=[], offsets={}), what=KEY,
                              max_bytes=10)  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    [
        {"count": -1},
        {"count": U64_MAX + 1},
        {"delta": I64_MAX + 1},
        {"port": U16_MAX + 1},
        {"version": 4},
        {"flag": 1},
        {"count": True},
        {"digest": tuple(range(31))},
        {"digest": list(range(32))},
        {"owner": Owner(node_id=0, boot_id=uuid.UUID(int=1), process_term=1)},
        {"owner": Owner(node_id=1, boot_id="0190c1e2-0000-7000-8000-000000000abc", process_term=1)},  # type: ignore[arg-type]
        {"name": "lone \ud800 surrogate"},
    ],
)
def test_encode_checked_refuses_values_the_type_refuses(changes: dict[str, Any]) -> None:
    record = msgspec.structs.replace(BASE, **changes)
    with pytest.raises(InvalidArgument) as caught:
        encode_checked(record, what=KEY, max_bytes=MAX)
    assert str(caught.value).startswith(f"{KEY}: ")


def test_bad_caller_input_is_invalid_argument() -> None:
    data = encode(BASE)
    for max_bytes in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match="max_bytes"):
            decode(data, Sample, key=KEY, max_bytes=max_bytes)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="must be bytes"):
        decode(data.decode(), Sample, key=KEY, max_bytes=MAX)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="not a msgspec Struct"):
        decode(data, dict, key=KEY, max_bytes=MAX)
    with pytest.raises(InvalidArgument, match="not a msgspec Struct"):
        encode({"version": 1})  # type: ignore[arg-type]
