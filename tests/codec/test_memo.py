"""The memoized pure work: `codec.memo.pure_memo`, the codec's memo of immutable record values,
and the canonical-UUID check's memory of strings it proved canonical."""

from __future__ import annotations

from typing import Literal

import pytest

from laminar_cluster.codec import Record, decode, encode
from laminar_cluster.codec.memo import pure_memo
from laminar_cluster.codec.shape import ShapeViolation, canonical_uuid
from laminar_cluster.codec.types import U64, is_deeply_immutable
from laminar_cluster.errors import CorruptRecord


class Frozen(Record):
    version: Literal[1]
    name: str
    counts: tuple[U64, ...]


class WithList(Record):
    version: Literal[1]
    items: list[U64]


class WithDict(Record):
    version: Literal[1]
    offsets: dict[str, U64]


class Nested(Record):
    version: Literal[1]
    inner: WithList | None


def test_pure_memo_computes_each_distinct_input_once() -> None:
    calls: list[tuple[int, ...]] = []

    @pure_memo(8)
    def total(values: tuple[int, ...]) -> int:
        calls.append(values)
        return sum(values)

    assert total((1, 2)) == 3
    assert total((1, 2)) == 3
    assert total((2, 2)) == 4
    assert calls == [(1, 2), (2, 2)]


def test_pure_memo_bypasses_unhashable_arguments() -> None:
    calls: list[object] = []

    @pure_memo(8)
    def total(values: list[int]) -> int:
        calls.append(values)
        return sum(values)

    assert total([1, 2]) == 3
    assert total([1, 2]) == 3
    assert len(calls) == 2


def test_pure_memo_never_remembers_a_raise() -> None:
    calls: list[int] = []

    @pure_memo(8)
    def checked(value: int) -> int:
        calls.append(value)
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value

    for _ in range(2):
        with pytest.raises(ValueError, match="-1 is negative"):
            checked(-1)
    assert calls == [-1, -1]


def test_pure_memo_is_bounded() -> None:
    calls: list[int] = []

    @pure_memo(2)
    def same(value: int) -> int:
        calls.append(value)
        return value

    for value in (1, 2, 3, 1):  # 3 empties the full memo, so 1 is computed again
        same(value)
    assert calls == [1, 2, 3, 1]


def test_immutable_types_are_only_frozen_structs_and_tuples() -> None:
    assert is_deeply_immutable(Frozen)
    assert not is_deeply_immutable(WithList)
    assert not is_deeply_immutable(WithDict)
    assert not is_deeply_immutable(Nested)  # a list one level down


def test_decode_shares_the_value_of_identical_bytes_of_an_immutable_type() -> None:
    body = encode(Frozen(version=1, name="a", counts=(1, 2)))
    first = decode(body, Frozen, key="k", max_bytes=1024)
    assert decode(bytes(body), Frozen, key="k", max_bytes=1024) is first
    assert first == Frozen(version=1, name="a", counts=(1, 2))


def test_decode_gives_every_reader_its_own_mutable_value() -> None:
    body = encode(WithList(version=1, items=[1]))
    first = decode(body, WithList, key="k", max_bytes=1024)
    first.items.append(2)  # a reader changing its own copy
    again = decode(body, WithList, key="k", max_bytes=1024)
    assert again is not first
    assert again.items == [1]


def test_a_corrupt_body_is_refused_every_time() -> None:
    body = encode(Frozen(version=1, name="a", counts=(1,))) + b" "
    for _ in range(2):
        with pytest.raises(CorruptRecord, match="not its canonical encoding"):
            decode(body, Frozen, key="k", max_bytes=1024)


def test_decode_still_checks_the_size_before_the_memo() -> None:
    body = encode(Frozen(version=1, name="a", counts=(1,)))
    decode(body, Frozen, key="k", max_bytes=1024)
    with pytest.raises(CorruptRecord, match="maximum is 8"):
        decode(body, Frozen, key="k", max_bytes=8)


def test_canonical_uuid_still_refuses_after_proving_others() -> None:
    good = "0b4f5a8e-6d1c-4c1e-9a57-3f1b2c4d5e6f"
    assert canonical_uuid(good, "id") == good
    assert canonical_uuid(good, "id") == good
    for bad in (good.upper(), good.replace("-", ""), "00000000-0000-0000-0000-000000000000"):
        for _ in range(2):
            with pytest.raises(ShapeViolation):
                canonical_uuid(bad, "id")
    with pytest.raises(ShapeViolation, match="not a UUID"):
        canonical_uuid(7, "id")  # type: ignore[arg-type]
