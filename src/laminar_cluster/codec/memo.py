"""Memoized pure functions of immutable values.

Every poll re-reads the same heads, leases and authority records, and the codec hands the same
immutable value to every reader of the same bytes (`canonical`); the checks and digests computed
from those values are pure, so they are computed once per distinct input. Only for functions
whose result depends on nothing but their (hashable, immutable) arguments: frozen records,
tuples, str, int, bytes. A call that raises is not remembered: it raises again next time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def pure_memo(entries_max: int) -> Callable[[F], F]:
    """Remember up to `entries_max` results of a pure function, by its positional arguments
    (the store is emptied when full). Unhashable arguments (a list) bypass the memo."""
    assert entries_max >= 1

    def wrap(function: F) -> F:
        results: dict[tuple[object, ...], object] = {}

        @functools.wraps(function)
        def memoized(*args: object) -> object:
            try:
                return results[args]
            except KeyError:
                pass
            except TypeError:  # an unhashable argument: computed, never remembered
                return function(*args)
            value = function(*args)
            if len(results) >= entries_max:
                results.clear()
            results[args] = value
            return value

        memoized.cache_clear = results.clear  # type: ignore[attr-defined]
        return cast(F, memoized)

    return wrap
