"""The error tree (errors.py): `restated` keeps a cause's kind, key and reason; `RETRYABLE` is
what a re-reading loop may retry."""

from __future__ import annotations

import enum

import pytest

from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import (
    RETRYABLE,
    Contended,
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    InventoryChanged,
    LaminarError,
    NotSupported,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
    restated,
)
from laminar_cluster.membership.process_lease import ProcessFenced


class Why(enum.Enum):
    FIRST = "first"
    SECOND = "second"


@pytest.mark.parametrize(
    "cause",
    [
        InvalidArgument("x"),
        DeadlineExceeded("x"),
        StoreUnavailable("x"),
        Fenced("x"),
        Contended("x"),
        Refused("x", reason=Why.FIRST),
        InventoryChanged("x"),
        CorruptRecord("x", key="k", reason=Why.FIRST),
        WriteOutcomeUnknown("x", key="k"),
        ObjectNotFound("x", key="k"),
        ObjectAlreadyExists("x", key="k"),
        PreconditionFailed("x", key="k"),
        NotSupported("x", key="k"),
    ],
)
def test_restated_keeps_the_kind_key_and_reason(cause: LaminarError) -> None:
    again = restated(cause, "while doing y: x")
    assert type(again) is type(cause) and again is not cause
    assert str(again) == "while doing y: x"
    assert again.reason is cause.reason
    assert getattr(again, "key", None) == getattr(cause, "key", None)


def test_restated_may_name_another_reason() -> None:
    again = restated(Refused("x", reason=Why.FIRST), "y", reason=Why.SECOND)
    assert isinstance(again, Refused) and again.reason is Why.SECOND
    assert restated(Fenced("x"), "y", reason=Why.SECOND).reason is Why.SECOND


def test_a_subclass_is_restated_as_its_kind() -> None:
    again = restated(ProcessFenced("superseded", successor=None), "while leading: superseded")
    assert type(again) is Fenced


def test_an_error_of_no_kind_stays_of_no_kind() -> None:
    again = restated(ShapeViolation("bad shape"), "reading v2: bad shape")
    assert type(again) is LaminarError


def test_retryable_are_the_kinds_a_re_read_settles() -> None:
    retried = (StoreUnavailable, DeadlineExceeded, Contended, Refused, InventoryChanged)
    assert all(issubclass(kind, RETRYABLE) for kind in retried)
    assert issubclass(WriteOutcomeUnknown, RETRYABLE)  # its read-back is the re-read
    for never in (Fenced, CorruptRecord, InvalidArgument, ObjectNotFound):
        assert not issubclass(never, RETRYABLE)
