"""Built-in aggregations: `Count`, `Sum`, `Min`, `Max`, `Mean`.

Each is a small frozen declaration with a `name` (its output column) and the pure functions a
`VnodeRun` calls on an accumulator of plain msgpack-encodable values:

* `init()`: the empty accumulator;
* `value(event)`: the number this event contributes (it calls the user's `fn`; the result
  must be an `int` or `float`, `bool` is refused; `Count` contributes nothing and returns None);
* `add(acc, value)`: a new accumulator (never mutates `acc`);
* `merge(a, b)`: the accumulator of both (session windows merge);
* `result(acc)`: the output value (`Mean` of nothing and `Min`/`Max` of nothing are None).

`update(acc, event)` is `add(acc, value(event))` in one call (the running-aggregate path).
Sums of ints stay ints; `Mean` is a float.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from laminar_cluster.errors import InvalidArgument


def _number(name: str, value: object) -> int | float:
    kind = type(value)
    if kind is int or kind is float:
        return value  # type: ignore[return-value]
    raise TypeError(f"aggregation {name}: value {value!r} is a {kind.__name__}; need int or float")


def _check(name: object, fn: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"aggregation name {name!r} is not a non-empty str")
    if fn is not None and not callable(fn):
        raise InvalidArgument(f"aggregation {name}: fn {fn!r} is not callable; pass fn(event)")


class Aggregation:
    """Base of the built-in aggregations (see the module docstring for the contract)."""

    __slots__ = ()
    kind: ClassVar[str] = ""
    name: str

    def init(self) -> Any:
        """The empty accumulator."""
        raise NotImplementedError

    def value(self, event: Any) -> Any:
        """The number `event` contributes (TypeError when it is not an int or float)."""
        raise NotImplementedError

    def add(self, acc: Any, value: Any) -> Any:
        """The accumulator after adding `value` (a new object; `acc` is left as it was)."""
        raise NotImplementedError

    def update(self, acc: Any, event: Any) -> Any:
        """`add(acc, value(event))`."""
        return self.add(acc, self.value(event))

    def merge(self, a: Any, b: Any) -> Any:
        """The accumulator of everything `a` and `b` accumulated."""
        raise NotImplementedError

    def result(self, acc: Any) -> Any:
        """The output value of `acc`."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Count(Aggregation):
    """The number of events."""

    name: str = "count"
    kind: ClassVar[str] = "count"

    def __post_init__(self) -> None:
        _check(self.name, None)

    def init(self) -> int:
        """0."""
        return 0

    def value(self, event: Any) -> None:
        """Nothing: a count does not read the event."""
        return None

    def add(self, acc: int, value: Any) -> int:
        """acc + 1."""
        return acc + 1

    def update(self, acc: int, event: Any) -> int:
        """acc + 1."""
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        """a + b."""
        return a + b

    def result(self, acc: int) -> int:
        """The count."""
        return acc


@dataclass(frozen=True, slots=True)
class Sum(Aggregation):
    """The sum of `fn(event)`."""

    fn: Callable[[Any], int | float]
    name: str = "sum"
    kind: ClassVar[str] = "sum"

    def __post_init__(self) -> None:
        _check(self.name, self.fn)

    def init(self) -> int:
        """0."""
        return 0

    def value(self, event: Any) -> int | float:
        """fn(event), an int or float."""
        return _number(self.name, self.fn(event))

    def add(self, acc: int | float, value: int | float) -> int | float:
        """acc + value."""
        return acc + value

    def update(self, acc: int | float, event: Any) -> int | float:
        """acc + fn(event)."""
        return acc + _number(self.name, self.fn(event))

    def merge(self, a: int | float, b: int | float) -> int | float:
        """a + b."""
        return a + b

    def result(self, acc: int | float) -> int | float:
        """The sum."""
        return acc


@dataclass(frozen=True, slots=True)
class _Extreme(Aggregation):
    """The least or the greatest `fn(event)` (None before any event): `Min` and `Max`."""

    fn: Callable[[Any], int | float]
    name: str = "extreme"
    kind: ClassVar[str] = "extreme"

    def __post_init__(self) -> None:
        _check(self.name, self.fn)

    def init(self) -> None:
        """None."""
        return None

    def value(self, event: Any) -> int | float:
        """fn(event), an int or float."""
        return _number(self.name, self.fn(event))

    def add(self, acc: int | float | None, value: int | float) -> int | float:
        """`value` if it is the new extreme, else `acc`."""
        return value if acc is None or self.beats(value, acc) else acc

    def merge(self, a: int | float | None, b: int | float | None) -> int | float | None:
        """The extreme of a and b."""
        return a if b is None else self.add(a, b)

    def result(self, acc: int | float | None) -> int | float | None:
        """The extreme."""
        return acc

    def beats(self, value: int | float, acc: int | float) -> bool:
        """Whether `value` replaces `acc`."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Min(_Extreme):
    """The least `fn(event)` (None before any event)."""

    name: str = "min"
    kind: ClassVar[str] = "min"

    def beats(self, value: int | float, acc: int | float) -> bool:
        """value < acc."""
        return value < acc


@dataclass(frozen=True, slots=True)
class Max(_Extreme):
    """The greatest `fn(event)` (None before any event)."""

    name: str = "max"
    kind: ClassVar[str] = "max"

    def beats(self, value: int | float, acc: int | float) -> bool:
        """value > acc."""
        return value > acc


@dataclass(frozen=True, slots=True)
class Mean(Aggregation):
    """The arithmetic mean of `fn(event)` as a float (None before any event).

    The accumulator is the list `[sum, count]`.
    """

    fn: Callable[[Any], int | float]
    name: str = "mean"
    kind: ClassVar[str] = "mean"

    def __post_init__(self) -> None:
        _check(self.name, self.fn)

    def init(self) -> list[int | float]:
        """[0, 0]."""
        return [0, 0]

    def value(self, event: Any) -> int | float:
        """fn(event), an int or float."""
        return _number(self.name, self.fn(event))

    def add(self, acc: list[int | float], value: int | float) -> list[int | float]:
        """[sum + value, count + 1]."""
        return [acc[0] + value, acc[1] + 1]

    def merge(self, a: list[int | float], b: list[int | float]) -> list[int | float]:
        """Sums and counts added."""
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: list[int | float]) -> float | None:
        """sum / count, or None when nothing was added."""
        return acc[0] / acc[1] if acc[1] else None
