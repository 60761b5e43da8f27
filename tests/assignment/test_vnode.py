"""Key to vnode: a documented canonical encoding, xxh3_64 modulo 256."""

from __future__ import annotations

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from laminar_cluster.assignment.vnode import (
    VNODE_COUNT,
    encode_key,
    vnode_for_key,
    vnode_for_partition,
)
from laminar_cluster.errors import InvalidArgument


def test_encoding_is_the_documented_one() -> None:
    assert encode_key("ab") == b"s\x02\x00\x00\x00ab"
    assert encode_key(b"\x01") == b"b\x01\x00\x00\x00\x01"
    assert encode_key(-1) == b"i" + b"\xff" * 8
    assert encode_key(("a", 1)) == b"t\x02\x00\x00\x00" + encode_key("a") + encode_key(1)


def test_vnode_is_xxh3_of_the_encoding_modulo_256() -> None:
    for key in ["user-42", b"raw", 7, ("tenant", 3)]:
        expected = xxhash.xxh3_64_intdigest(encode_key(key)) % 256
        assert vnode_for_key(key) == expected


def test_types_do_not_collide() -> None:
    assert encode_key("1") != encode_key(1) != encode_key(b"1")
    assert encode_key(("ab", "c")) != encode_key(("a", "bc"))


@pytest.mark.parametrize("bad", [True, 1.5, None, 2**63, [1], {"a": 1}])
def test_unsupported_keys_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        vnode_for_key(bad)  # type: ignore[arg-type]


@given(
    st.recursive(
        st.text() | st.binary() | st.integers(-(2**63), 2**63 - 1),
        lambda inner: st.tuples(inner, inner),
        max_leaves=8,
    )
)
def test_every_key_maps_into_range_deterministically(key: object) -> None:
    vnode = vnode_for_key(key)  # type: ignore[arg-type]
    assert 0 <= vnode < VNODE_COUNT
    assert vnode == vnode_for_key(key)  # type: ignore[arg-type]


def test_partitions_map_modulo() -> None:
    assert [vnode_for_partition(p) for p in (0, 255, 256, 513)] == [0, 255, 0, 1]
    with pytest.raises(InvalidArgument):
        vnode_for_partition(-1)
