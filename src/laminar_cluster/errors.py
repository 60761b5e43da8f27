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

Messages name the object and one fact, with numbers.
"""

from __future__ import annotations


class LaminarError(Exception):
    """Base of every error raised on purpose by laminar-cluster."""


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

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class CorruptRecord(LaminarError):
    """An object in the store is malformed, foreign or oversized: report it, never trust it."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
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

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
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
