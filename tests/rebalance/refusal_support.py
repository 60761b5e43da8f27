"""`raises_because`: assert an error's kind and reason, the way callers branch on them (the
message is for people; tests match it only where the wording itself is under test)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest

from laminar_cluster.errors import LaminarError

E = TypeVar("E", bound=LaminarError)


@contextmanager
def raises_because(kind: type[E], reason: enum.Enum | None) -> Iterator[pytest.ExceptionInfo[E]]:
    """Like `pytest.raises(kind)`, and the error's `reason` is exactly `reason`."""
    with pytest.raises(kind) as info:
        yield info
    assert info.value.reason is reason, (info.value.reason, str(info.value))
