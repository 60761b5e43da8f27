"""Errors of the jobs layer: kinds of `laminar_cluster.errors` with the facts a job needs.

| error              | kind             | the caller ...                                        |
|--------------------|------------------|-------------------------------------------------------|
| BadEvent           | LaminarError     | sends the raw bytes to the dead-letter stream         |
| StepFailed         | LaminarError     | aborts the checkpoint and stops the job ("stop")      |
| StateNotEncodable  | InvalidArgument  | fixes the step's state type (msgspec must encode it)  |
"""

from __future__ import annotations

from laminar_cluster.errors import InvalidArgument, LaminarError


class BadEvent(LaminarError):
    """An input event is not a JSON object of the job's event type (message: one-line reason)."""


class StepFailed(LaminarError):
    """A user function (key, event time, step or aggregation) raised under the "stop" policy.

    `job`, `key` (None when the key function itself raised), `partition` and `offset` name the
    event; the message names them too, and the user's exception is the `__cause__`.
    """

    def __init__(self, message: str, *, job: str, key: object, partition: int, offset: int) -> None:
        super().__init__(message)
        self.job = job
        self.key = key
        self.partition = partition
        self.offset = offset


class StateNotEncodable(InvalidArgument):
    """A step's per-key state cannot be encoded by msgspec (the message names key and type)."""
