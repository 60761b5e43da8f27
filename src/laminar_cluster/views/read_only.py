"""A store wrapper for the views: reads pass through, every write is refused before it reaches
the store, so no path below a view (a head repair, a deployment identity create) can write."""

from __future__ import annotations

from laminar_cluster.errors import NotSupported
from laminar_cluster.store import PutMode, PutResult
from laminar_cluster.store.forwarding import ForwardingStore


class ReadOnlyStore(ForwardingStore):
    """`inner` for reads; every write is refused before it reaches the store."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        raise NotSupported(f"{key}: status is read-only; refused a put", key=key)

    async def delete(self, key: str) -> None:
        raise NotSupported(f"{key}: status is read-only; refused a delete", key=key)
