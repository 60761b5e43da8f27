"""The outcome-audit cache (LA §4.4.3 "Cache"; LA-T63).

One entry per authority instance, keyed by (outcome_head, commit_head, floor), tagged with the
highest sequence seen for the key; single-flighted cold audits; failures never cached; an
older audit never replaces a newer entry. Request counts come from PausingStore's log.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import (
    OutcomeSnapshot,
    cluster_outcome,
    cluster_outcomes,
)
from laminar_cluster.authority.outcome_audit import AuditCache, audit_cache, audit_key, cached_audit
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.lease.paths import RECORDS_PREFIX, record_path
from laminar_cluster.lease.records import OutcomeLink
from laminar_cluster.store import ObjectStore
from tests.authority.test_cluster_outcome_helpers import (
    TrackingStore,
    elect,
    head,
    open_leader,
    record,
    record_all,
    record_gets,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


def _key(seq: int) -> tuple[OutcomeLink, None, None]:
    return (OutcomeLink(sequence=seq, epoch=seq, checkpoint_id=seq), None, None)


def _snapshot(epoch: int) -> OutcomeSnapshot:
    return OutcomeSnapshot(outcomes=(), terminal_links=(_key(epoch)[0],), commit_links=())


def test_la_t63_audit_cache_install_is_sequence_monotone() -> None:
    cache = AuditCache()
    newer, older = _snapshot(10), _snapshot(5)
    cache.install(_key(10), 10, newer)
    cache.install(_key(5), 5, older)  # an older concurrent audit finishing late
    assert cache.lookup(_key(5), 5) is None
    assert cache.lookup(_key(10), 10) is newer
    cache.install(_key(7), 10, older)  # same tag, another key: not installed
    assert cache.lookup(_key(10), 10) is newer
    replacement = _snapshot(10)
    cache.install(_key(10), 10, replacement)  # same tag, same key: replaced
    assert cache.lookup(_key(10), 10) is replacement
    assert cache.lookup(_key(10), 12) is replacement  # a hit raises the tag to 12 ...
    cache.install(_key(11), 11, older)  # ... so an audit tagged 11 no longer displaces it
    assert cache.lookup(_key(10), 12) is replacement
    cache.install(_key(13), 13, older)
    assert cache.lookup(_key(13), 13) is older
    cache.clear()
    assert cache.lookup(_key(13), 13) is None


@LOCAL
def test_la_t63_audit_cache(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = TrackingStore(make_store())
        writer = open_leader(store, 1)
        proof = await elect(writer)
        await record_all(writer, proof, range(1, 9), commits=[2, 5])  # records 2..9
        history = set(range(2, 9))  # below the head (9)

        reader = open_leader(store, 2)
        store.reset_log()
        first = await cluster_outcomes(reader)
        assert [o.epoch for o in first] == list(range(1, 9))
        assert record_gets(store) - {9, 10} == history  # cold: the whole history, once
        # An unchanged head issues no history GETs: the pointer and head+1 only (the head
        # record itself was read and verified by the first read, and records never change).
        store.reset_log()
        assert await cluster_outcomes(reader) == first
        assert await cluster_outcome(reader, 3) == first[2]
        assert record_gets(store) == {10}
        assert all(key.startswith(RECORDS_PREFIX) or "head" in key for _, key in store.log)

        # An external append changes the key: the next read re-audits, reading only the one
        # new record (the new head) and its successor probe; the history is remembered.
        await record(writer, proof, 9)
        store.reset_log()
        assert [o.epoch for o in await cluster_outcomes(reader)][-1] == 9
        assert record_gets(store) == {10, 11}
        assert store.count("get", record_path(10)) == 1
        entry = audit_cache(reader).entry
        assert entry is not None and entry.key == audit_key(await head(reader))

        # 16 concurrent cold audits read every history record exactly once.
        cold = open_leader(store, 3)
        store.reset_log()
        assert await cold.load_record() == await head(reader)  # the head, read once
        results = await asyncio.gather(*(cluster_outcomes(cold) for _ in range(16)))
        assert all(result == results[0] for result in results)
        gets = Counter(key for op, key in store.log if op == "get")
        assert {gets[record_path(seq)] for seq in history | {9}} == {1}
        assert gets[record_path(10)] == 1  # every call reads the head; only the first GETs it
        gc.collect()
        assert len(audit_cache(cold).flights) == 0  # gates of finished audits are dropped

        # A failed audit is never cached: the next read audits again, and succeeds.
        failing = open_leader(store, 4)
        store.failing_gets.add(record_path(4))
        with pytest.raises(StoreUnavailable, match="scripted GET failure"):
            await cluster_outcomes(failing)
        assert audit_cache(failing).entry is None
        store.reset_log()
        assert await cluster_outcomes(failing) == results[0]
        assert record_path(4) in {key for _, key in store.log}

    asyncio.run(main())


@LOCAL
def test_la_t63_older_audit_cannot_replace_newer_entry(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = TrackingStore(make_store())
        writer = open_leader(store, 1)
        proof = await elect(writer)
        await record_all(writer, proof, [1, 2, 3])  # records 2, 3, 4
        reader = open_leader(store, 2)
        old_head = await head(reader)
        gate = store.pause_get(record_path(2))
        async with asyncio.TaskGroup() as group:
            stale = group.create_task(cached_audit(reader, old_head))
            await gate.wait_reached()
            await record(writer, proof, 4)  # record 5
            fresh = await cluster_outcomes(reader)  # audits and installs the newer head
            gate.release.set()
        assert [o.epoch for o in stale.result().outcomes] == [1, 2, 3]
        entry = audit_cache(reader).entry
        assert entry is not None
        assert entry.key == audit_key(await head(reader)) and entry.authority_sequence == 5
        assert entry.snapshot.outcomes == fresh

    asyncio.run(main())
