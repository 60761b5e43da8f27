"""The object-store layer: one async interface, its backends, and tools around it."""

from laminar_cluster.store.api import (
    CREATE,
    OVERWRITE,
    Create,
    GetResult,
    IfMatch,
    ObjectMeta,
    ObjectStore,
    Overwrite,
    PutMode,
    PutResult,
)
from laminar_cluster.store.factory import open_store
from laminar_cluster.store.keys import validate_key, validate_prefix
from laminar_cluster.store.readback import ReadBack, Resolution, put_resolved, read_back

__all__ = [
    "CREATE",
    "OVERWRITE",
    "Create",
    "GetResult",
    "IfMatch",
    "ObjectMeta",
    "ObjectStore",
    "Overwrite",
    "PutMode",
    "PutResult",
    "ReadBack",
    "Resolution",
    "open_store",
    "put_resolved",
    "read_back",
    "validate_key",
    "validate_prefix",
]
