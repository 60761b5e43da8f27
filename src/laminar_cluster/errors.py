"""The error tree of laminar-cluster.

Each kind says what the caller does next (SlateDB RFC 0007):

| error                | the caller ...                                              |
|----------------------|-------------------------------------------------------------|
| InvalidArgument      | fixes its input; retrying the same call fails the same way  |
| DeadlineExceeded     | gives up this operation; its deadline has passed            |
| StoreUnavailable     | retries within its deadline (only reads, or writes it can   |
|                      | read back)                                                  |
| WriteOutcomeUnknown  | reads the object back before doing anything else: the write |
|                      | may or may not have been applied                            |
| CorruptRecord        | reports it and never trusts the object                      |
| Fenced               | stops acting as leader or owner; never retries              |
| Contended            | re-reads and re-derives its decision from the winner        |
| Refused              | re-reads the durable state and decides again: the request   |
|                      | is well-formed, but what is durable forbids it (an epoch    |
|                      | below the GC horizon, a conflicting open witness, ...)      |
| InventoryChanged     | retries the whole read: a concurrent GC moved it            |
| ObjectNotFound, ObjectAlreadyExists, PreconditionFailed, NotSupported:                     |
|                      | store outcomes of one request, handled where they are       |
|                      | expected (they are race results at the store boundary)      |

Messages name the object and one fact, with numbers. They are for people: code and tests
never branch on them. Where a caller branches on which check refused it, the raiser attaches a
`reason` (a member of an enum its layer defines once, e.g. `rebalance.refusals.Refusal`).

A loop that re-reads the durable state before it acts again retries exactly `RETRYABLE`
(for WriteOutcomeUnknown, that re-read is its read-back); it stops on Fenced and reports
CorruptRecord; an exception that is not a LaminarError is a bug and propagates.
"""

from __future__ import annotations

import enum
from typing import Final


class LaminarError(Exception):
    """Base of every error raised on purpose by laminar-cluster.

    `reason`: which check refused, for callers and tests that branch on it (None: nobody does).
    """

    def __init__(self, *args: object, reason: enum.Enum | None = None) -> None:
        super().__init__(*args)
        self.reason = reason


class InvalidArgument(LaminarError):
    """The caller passed something that can never work: fix the input."""


class DeadlineExceeded(LaminarError):
    """The caller's absolute deadline passed before the operation finished."""


class StoreUnavailable(LaminarError):
    """The store failed this request and nothing is known to have changed: retry in the deadline."""


class WriteOutcomeUnknown(LaminarError):
    """A write was sent but its outcome is unknown: read the object back before anything else.

    Deliberately not a StoreUnavailable: a blind retry of a write is never safe.
    """

    def __init__(self, message: str, *, key: str, reason: enum.Enum | None = None) -> None:
        super().__init__(message, reason=reason)
        self.key = key


class CorruptRecord(LaminarError):
    """Durable state is malformed, foreign, oversized or inconsistent with itself: report it
    (naming `key`, the object, when one is to blame), never trust it."""

    def __init__(
        self, message: str, *, key: str | None = None, reason: enum.Enum | None = None
    ) -> None:
        super().__init__(message, reason=reason)
        self.key = key


class Fenced(LaminarError):
    """A newer owner or leader holds the authority: stop acting, never retry."""


class Contended(LaminarError):
    """Another writer won a race: re-read and re-derive the decision from the winner."""


class Refused(LaminarError):
    """The durable state forbids this request as asked: re-read it and decide again.

    Retrying the same request unchanged fails the same way.
    """


class InventoryChanged(LaminarError):
    """A concurrent change (a GC floor advance) moved what was being read: retry the whole read."""


class StoreError(LaminarError):
    """A definite answer from the store about one object (the request was processed)."""

    def __init__(self, message: str, *, key: str, reason: enum.Enum | None = None) -> None:
        super().__init__(message, reason=reason)
        self.key = key


class ObjectNotFound(StoreError):
    """The object does not exist."""


class ObjectAlreadyExists(StoreError):
    """A create-only write found the object present.

    On obstore backends this can also mean that our own write landed and its response was lost
    (the client retried and hit its own object), or that S3 answered 409 without writing:
    callers that must know read back (`laminar_cluster.store.readback`).
    """


class PreconditionFailed(StoreError):
    """A conditional update found another version than the one it named."""


class NotSupported(StoreError):
    """The backend cannot perform this kind of request."""


# What a loop that re-reads before acting again may retry (module docstring).
RETRYABLE: Final = (
    StoreUnavailable,
    DeadlineExceeded,
    Contended,
    Refused,
    WriteOutcomeUnknown,
    InventoryChanged,
)

_PLAIN_KINDS: Final = (
    InvalidArgument,
    DeadlineExceeded,
    StoreUnavailable,
    Fenced,
    Contended,
    Refused,
    InventoryChanged,
)
_STORE_KINDS: Final = (ObjectNotFound, ObjectAlreadyExists, PreconditionFailed, NotSupported)


def restated(error: LaminarError, message: str, *, reason: enum.Enum | None = None) -> LaminarError:
    """`error`'s kind again (its class in this module; a subclass such as ProcessFenced becomes
    its kind) with `message`, `error`'s key, and `reason` (default: `error`'s): for a caller
    that says what it was doing and raises it `from error`, so the kind survives the wrapping.
    A LaminarError of no kind stays one."""
    why = error.reason if reason is None else reason
    if isinstance(error, WriteOutcomeUnknown):
        return WriteOutcomeUnknown(message, key=error.key, reason=why)
    if isinstance(error, CorruptRecord):
        return CorruptRecord(message, key=error.key, reason=why)
    if isinstance(error, StoreError):
        store_kind = next((k for k in _STORE_KINDS if isinstance(error, k)), StoreError)
        return store_kind(message, key=error.key, reason=why)
    kind = next((k for k in _PLAIN_KINDS if isinstance(error, k)), LaminarError)
    return kind(message, reason=why)
