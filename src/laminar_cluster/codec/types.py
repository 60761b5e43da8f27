"""Field types and the `Record` base class of every durable record.

Integers are bounded `Annotated[int, msgspec.Meta(...)]` aliases, so the strict decoder rejects a
value outside the Rust type's range. msgspec decodes JSON integers of any size into a Python int
(`2**70` is accepted for a plain `int`), and it refuses `Meta` bounds that do not fit in an int64
("Integer bounds constraints ... that don't fit in an int64 are currently not supported"), so
`U64` cannot say `le=2**64-1`: it is `ge=0` only, and the codec checks every decoded integer
against the 64-bit envelope -2**63..2**64-1 itself (`canonical._check_int_envelope`). Together
they give exactly 0..2**64-1 for a u64.

`Digest32` is a fixed 32-byte digest (`assignment_digest`, drain-id digests), held in Python as a
tuple of 32 ints and written as a JSON array of 32 integers 0..255, as serde writes `[u8; 32]`.

`Record` is the base of every record struct. What msgspec does with struct configuration on
subclassing (checked against msgspec 0.22, pinned by tests/codec/test_canonical.py):

* `frozen` and `forbid_unknown_fields` are inherited at run time by subclasses;
* `kw_only` is NOT inherited: it applies only to the fields declared on the class that passes it
  (as in dataclasses), and keyword-only fields are placed after positional ones, so a subclass
  that forgot `kw_only=True` would get positional fields and, for required-after-optional
  fields, a TypeError at import;
* mypy's dataclass_transform support does not know the run-time inheritance either: it reports
  "Non-frozen dataclass cannot inherit from a frozen dataclass" on every subclass that does not
  repeat `frozen=True`.

So `Record` uses a small `StructMeta` subclass that makes `kw_only=True` the default for every
subclass, and re-declares `dataclass_transform(kw_only_default=True, frozen_default=True)` so
mypy sees the same thing. A record is then declared as plain `class LeaderLease(Record): ...`.
The metaclass also refuses the options that would break the canonical form: `omit_defaults=True`
(a field equal to its default would vanish from the bytes), `array_like=True`, `frozen=False`
and `forbid_unknown_fields=False`.

`check_record_type` checks a record type's whole schema once (cached) before it is encoded or
decoded: an allow-list of field types whose JSON form is canonical (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, dataclass_transform

import msgspec
import msgspec.inspect as mi

from laminar_cluster.errors import InvalidArgument

U8_MAX: Final = 2**8 - 1
U16_MAX: Final = 2**16 - 1
U32_MAX: Final = 2**32 - 1
U64_MAX: Final = 2**64 - 1
I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1
DIGEST32_BYTES: Final = 32

U8 = Annotated[int, msgspec.Meta(ge=0, le=U8_MAX)]
U16 = Annotated[int, msgspec.Meta(ge=0, le=U16_MAX)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=U32_MAX)]
# Upper bound U64_MAX: enforced by the codec's 64-bit envelope check (see the module docstring).
U64 = Annotated[int, msgspec.Meta(ge=0)]
NonZeroU64 = Annotated[int, msgspec.Meta(ge=1)]
I64 = Annotated[int, msgspec.Meta(ge=I64_MIN, le=I64_MAX)]
Digest32 = Annotated[
    tuple[U8, ...], msgspec.Meta(min_length=DIGEST32_BYTES, max_length=DIGEST32_BYTES)
]

# Struct options a record may not set to these values (see the module docstring).
_REFUSED_OPTIONS: Final = {
    "omit_defaults": True,
    "array_like": True,
    "frozen": False,
    "forbid_unknown_fields": False,
}


class _RecordMeta(msgspec.StructMeta):
    """Makes `kw_only=True` the default and refuses options that break the canonical form."""

    def __new__(
        mcls,
        name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        /,
        **config: Any,
    ) -> _RecordMeta:
        for option, refused in _REFUSED_OPTIONS.items():
            if option in config and config[option] is refused:
                raise TypeError(f"record type {name}: {option}={refused} breaks canonical bytes")
        config.setdefault("kw_only", True)
        return super().__new__(mcls, name, bases, namespace, **config)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(msgspec.field,))
class Record(
    msgspec.Struct,
    metaclass=_RecordMeta,
    frozen=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """Base of every durable record and of the structs nested in one.

    A top-level record's first field is `version: Literal[n]`; nested structs have no version.
    """


def digest32(raw: bytes) -> tuple[int, ...]:
    """The `Digest32` value of 32 raw digest bytes."""
    if not isinstance(raw, bytes):
        raise InvalidArgument(f"digest must be bytes, not {type(raw).__name__}")
    if len(raw) != DIGEST32_BYTES:
        raise InvalidArgument(f"digest is {len(raw)} bytes; a Digest32 is {DIGEST32_BYTES}")
    return tuple(raw)


def digest32_bytes(value: Sequence[int]) -> bytes:
    """The 32 raw bytes of a `Digest32` value."""
    if len(value) != DIGEST32_BYTES:
        raise InvalidArgument(f"digest has {len(value)} items; a Digest32 has {DIGEST32_BYTES}")
    try:
        return bytes(value)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"digest items must be ints 0..255: {error}") from error


# Types already checked by `check_record_type`. Record types are module-level classes, so this
# holds at most one entry per record type in the program.
_CHECKED: set[object] = set()

# Leaf types whose JSON form is canonical without further checks.
_PLAIN_LEAVES: Final = (mi.StrType, mi.BoolType, mi.NoneType, mi.UUIDType, mi.EnumType)


def check_record_type(type_: object) -> None:
    """Raise InvalidArgument unless `type_` is a record type the codec can encode canonically.

    A record type is a msgspec Struct, untagged, whose first encoded field is `version` with a
    `Literal` of ints. Every type reachable from it must be on this allow-list: str, bool, None,
    UUID, Enum, Literal, ints with a lower bound (the aliases above; msgspec takes bounds within
    int64 only, and the codec bounds every int to -2**63..2**64-1 on top of that), list, variable or
    fixed tuples, dicts with str keys, unions of these, and structs that set `forbid_unknown_fields`
    and neither `omit_defaults` nor `array_like`; and `msgspec.Raw`, embedded JSON kept as
    bytes: the codec proves it well-formed JSON (the strict decode) and the bytes around it
    canonical, while the embedded value's own form is its owner's rule (the event log's record
    segments, `connectors.eventlog_segments`). Refused, with the reason: floats (msgspec writes
    `1e16` and `null` for infinity where json.dumps writes `1e+16` and `Infinity`; SC §2.4 has no
    floats), ints without a lower bound, dicts with non-str keys (msgspec cannot order them, and
    serde would sort them as numbers), bytes (base64 is no record format here), Any, sets, dates and
    the rest. A struct that tolerates unknown fields is refused too: the canonical check would
    reject them anyway, but msgspec skips an unknown value recursively, so a deeply nested one would
    hit the recursion limit before that.
    """
    if type_ in _CHECKED:
        return
    name = getattr(type_, "__name__", repr(type_))
    if not (isinstance(type_, type) and issubclass(type_, msgspec.Struct)):
        raise InvalidArgument(f"record type {name}: is not a msgspec Struct")
    try:
        info = mi.type_info(type_)
    except (TypeError, ValueError, NameError) as error:
        raise InvalidArgument(f"record type {name}: msgspec refuses it: {error}") from error
    assert isinstance(info, mi.StructType)
    problem = _version_problem(info) or _type_problem(info, name, set())
    if problem is not None:
        raise InvalidArgument(f"record type {name}: {problem}")
    _CHECKED.add(type_)


def _version_problem(info: mi.StructType) -> str | None:
    if info.tag_field is not None:
        return f"is tagged ({info.tag_field!r} would be written before version)"
    if not info.fields or info.fields[0].encode_name != "version":
        return "first field is not `version`"
    version = info.fields[0].type
    if not isinstance(version, mi.LiteralType) or not all(
        type(value) is int for value in version.values
    ):
        return "`version` is not a Literal of ints"
    return None


def _type_problem(t: mi.Type, path: str, seen: set[type]) -> str | None:
    """The first reason `t` (at `path`) has no canonical JSON form, or None."""
    if isinstance(t, (*_PLAIN_LEAVES, mi.LiteralType, mi.RawType)):
        return None
    if isinstance(t, mi.Metadata):
        return _type_problem(t.type, path, seen)
    if isinstance(t, mi.IntType):
        return _int_problem(t, path)
    if isinstance(t, (mi.ListType, mi.VarTupleType)):
        return _type_problem(t.item_type, f"{path}[]", seen)
    if isinstance(t, mi.TupleType):
        items = [(item, f"{path}[{i}]") for i, item in enumerate(t.item_types)]
        return _first_problem(items, seen)
    if isinstance(t, mi.UnionType):
        return _first_problem([(member, path) for member in t.types], seen)
    if isinstance(t, mi.DictType):
        if not isinstance(t.key_type, mi.StrType):
            return f"{path} is a dict whose keys are not str"
        return _type_problem(t.value_type, f"{path}{{}}", seen)
    if isinstance(t, mi.StructType):
        return _struct_problem(t, path, seen)
    if isinstance(t, mi.FloatType):
        return f"{path} is a float; records hold no floats"
    return f"{path} has type {type(t).__name__}, which has no canonical record form"


def _first_problem(items: list[tuple[mi.Type, str]], seen: set[type]) -> str | None:
    for t, path in items:
        problem = _type_problem(t, path, seen)
        if problem is not None:
            return problem
    return None


def _int_problem(t: mi.IntType, path: str) -> str | None:
    low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else None)
    # A bound outside int64 cannot occur here: msgspec refuses it before this check runs.
    if low is None:
        return f"{path} is an int without a lower bound (use U64, I64, ...)"
    return None


def _struct_problem(t: mi.StructType, path: str, seen: set[type]) -> str | None:
    if t.cls in seen:
        return None
    seen.add(t.cls)
    config = t.cls.__struct_config__
    if config.omit_defaults:
        return f"{path} ({t.cls.__name__}) sets omit_defaults"
    if config.array_like:
        return f"{path} ({t.cls.__name__}) sets array_like"
    if not config.forbid_unknown_fields:
        return f"{path} ({t.cls.__name__}) does not set forbid_unknown_fields"
    return _first_problem([(f.type, f"{path}.{f.encode_name}") for f in t.fields], seen)


_IMMUTABLE: dict[type, bool] = {}


def is_deeply_immutable(type_: type) -> bool:
    """Whether every value of the record type `type_` is immutable all the way down: frozen
    structs, tuples, str, int, bool, None, UUID, Enum and Literal only (no list, no dict).
    The codec may then hand the same decoded value to every reader of the same bytes."""
    known = _IMMUTABLE.get(type_)
    if known is None:
        known = _immutable(mi.type_info(type_), set())
        _IMMUTABLE[type_] = known
    return known


def _immutable(t: mi.Type, seen: set[type]) -> bool:
    if isinstance(t, (*_PLAIN_LEAVES, mi.LiteralType, mi.IntType)):
        return True
    if isinstance(t, mi.Metadata):
        return _immutable(t.type, seen)
    if isinstance(t, mi.VarTupleType):
        return _immutable(t.item_type, seen)
    if isinstance(t, (mi.TupleType, mi.UnionType)):
        members = t.item_types if isinstance(t, mi.TupleType) else t.types
        return all(_immutable(member, seen) for member in members)
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return True
        seen.add(t.cls)
        return bool(t.cls.__struct_config__.frozen) and all(
            _immutable(f.type, seen) for f in t.fields
        )
    return False  # list, dict and anything else a reader could change in place
