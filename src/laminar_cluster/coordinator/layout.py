"""Layout 1 stores are refused, never misread (docs/protocols/distributed-checkpoint.md,
"The old layout"; DC-17).

Layout 1 wrote one `vnode={v:05}.json` partial per stateful vnode and a separate
`output/node={n:020}.json` beside a version 1 manifest; layout 2 writes one state object per
participant and carries the output in a version 2 manifest. The two cannot be mixed: a layout 2
reader would find no state object for a layout 1 Commit, and a layout 1 binary does not know
state objects. So:

* `refuse_layout1(store)` (a node's and `laminar-cluster output`'s first step, before anything
  is written): one listing of the first page of `checkpoints/attempt=` keys. Committed attempts
  keep their outputs for ever (DC-13), so a store layout 1 ever committed in holds an `output/`
  key in its oldest attempts, which list first.
* every manifest and marker read refuses a version 1 body (`objects.read_record`).

Both raise InvalidArgument (the caller fixes its input, the store; retrying fails the same way)
with one line naming the object, the layout and what to do.
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.coordinator.paths import ATTEMPTS_PREFIX, is_layout1_key
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import ObjectStore

FIRST_PAGE_KEYS: Final = 1_000


def layout1_error(key: str) -> InvalidArgument:
    """The one-line refusal of a layout 1 object."""
    return InvalidArgument(
        f"{key}: written by the old checkpoint layout 1 (one object per vnode), which this "
        "version cannot read; restore that deployment with the previous release, or point "
        "this one at a new store (or a new prefix)"
    )


async def refuse_layout1(store: ObjectStore) -> None:
    """InvalidArgument if the first page of attempt keys holds a layout 1 object; one LIST."""
    page = await store.list(ATTEMPTS_PREFIX, limit=FIRST_PAGE_KEYS)
    for meta in page:
        if is_layout1_key(meta.key):
            raise layout1_error(meta.key)
