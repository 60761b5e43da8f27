"""The operators' report a node lease record carries (docs/protocols/membership.md ML-12):
version 2 records carry the node's request counts by kind, its assignment version and its
restoring vnodes, written with each start and renewal at no extra request; a version 1 record
still decodes (without a report); a malformed report is refused on read and never written."""

from __future__ import annotations

import asyncio
from collections import Counter

import msgspec
import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.membership import ProcessLeaseHolder, activate, node_lease_path
from laminar_cluster.membership.process_lease import read_node_record
from laminar_cluster.membership.records import (
    MAX_NODE_LEASE_RECORD_BYTES,
    NODE_TAKEOVERS_MAX,
    REPORT_RESTORING_VNODES_MAX,
    JobReport,
    NodeLeaseRecord,
    NodeLeaseRecordV1,
    NodeReport,
    NodeState,
    decode_node_record,
    encode_node_record,
    node_report,
)
from laminar_cluster.store import OVERWRITE, open_store
from laminar_cluster.store.counting import CountingStore

NODE = 7
FAR = 1e9
KEY = node_lease_path(NODE)
replace = msgspec.structs.replace


def test_ml12_each_renewal_carries_the_counts_of_the_requests_before_it() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=4)
        counted = CountingStore(open_store("memory://"))
        started_s = clock.monotonic()
        restoring = [9, 3]

        def report() -> NodeReport:
            return node_report(counted.requests, clock.monotonic() - started_s, 5, restoring)

        holder = ProcessLeaseHolder(counted, clock, NODE, ttl_s=2.0, report=report)
        acquired = await holder.acquire(deadline=FAR)
        first = acquired.record.report
        assert first is not None and first.requests.get == 1  # the start's own read
        assert first.requests.put == 0 and first.assignment_version == 5
        assert (first.restoring_count, first.restoring) == (2, (3, 9))
        clock.advance(0.5)
        await activate(holder, deadline=FAR)
        restoring.clear()
        clock.advance(0.25)
        renewed = await holder.renew(deadline=FAR)
        assert renewed.report is not None
        # The start, the roster's creation (ML-14: the first node to join) and the activation.
        assert renewed.report.requests.put == counted.requests["put"] - 1 == 3
        assert renewed.report.requests.counted_ms == 750
        assert (renewed.report.restoring_count, renewed.report.restoring) == (0, ())
        stored = await read_node_record(counted, NODE)
        assert stored is not None and stored.record == renewed

    asyncio.run(main())


def test_ml12_a_version_1_record_decodes_without_a_report() -> None:
    lease = ProcessLease(node=NODE, owner=_uuid(1), term=2, seq=5, expires_at_ms=10)
    old = _v1(lease, NodeState.ACTIVE)
    record = decode_node_record(encode(old), key=KEY, node=NODE)
    assert record.version == 2 and record.report is None
    assert (record.lease, record.state, record.nonce) == (lease, NodeState.ACTIVE, _uuid(2))
    with pytest.raises(CorruptRecord):  # a version 1 body with a report is neither version
        decode_node_record(encode(old)[:-1] + b',"report":null}', key=KEY, node=NODE)


def test_ml12_a_malformed_report_is_refused_on_read_and_never_written() -> None:
    record = _record(node_report(Counter(get=3), 1.0, 2, [4, 5]))
    assert decode_node_record(encode_node_record(record, key=KEY, node=NODE), key=KEY, node=NODE)
    assert record.report is not None
    bad = {
        "descending": replace(record.report, restoring=(5, 4)),
        "short": replace(record.report, restoring_count=3),
        "long": replace(record.report, restoring_count=1),
    }
    for report in bad.values():
        broken = replace(record, report=report)
        with pytest.raises(InvalidArgument, match="restoring"):
            encode_node_record(broken, key=KEY, node=NODE)
        with pytest.raises(CorruptRecord, match="restoring"):
            decode_node_record(encode(broken), key=KEY, node=NODE)


def test_ml12_the_widest_record_fits_its_byte_limit() -> None:
    many = range(65_535 - REPORT_RESTORING_VNODES_MAX - 5, 65_535)
    big = 2**64 - 1
    counts = Counter(get=big, head=big, put=big, list=big, delete=big)
    figures = JobReport(late_events=big, dead_letters=big)
    report = node_report(counts, 1e15, big, many, big, figures)  # quiescent through u64::MAX
    assert report.restoring_count == REPORT_RESTORING_VNODES_MAX + 5
    assert len(report.restoring) == REPORT_RESTORING_VNODES_MAX
    lease = ProcessLease(node=NODE, owner=_uuid(9), term=big - 1, seq=big - 1, expires_at_ms=-1)
    fence = ProcessLeaseFence(
        predecessor=replace(lease, owner=_uuid(8), term=big - 2, seq=big - 2), successor=lease
    )
    fences = tuple(
        replace(
            fence,
            predecessor=replace(fence.predecessor, term=big - 2 - i, seq=big - 2 - i),
            successor=replace(lease, term=big - 1 - i, seq=big - 1 - i),
        )
        for i in range(NODE_TAKEOVERS_MAX)
    )
    record = replace(
        _record(report), lease=lease, takeovers=fences, failure_domain="d" * 64, ttl_ms=600_000
    )
    body = encode(record)
    assert len(body) < MAX_NODE_LEASE_RECORD_BYTES


def test_dc21_a_report_carries_quiescent_through_and_one_written_before_it_still_decodes() -> None:
    """DC-21's field of the report is optional with a default: a version 2 record whose report
    was written without it (canonical bytes of the earlier shape) decodes with it None, a
    record carrying it round-trips, and bytes that are neither shape are refused."""
    record = _record(node_report(Counter(get=3), 1.0, 2, [4, 5], 17))
    assert record.report is not None and record.report.quiescent_through == 17
    body = encode_node_record(record, key=KEY, node=NODE)
    assert b'"quiescent_through":17,"job":null}' in body
    assert decode_node_record(body, key=KEY, node=NODE) == record
    busy = _record(node_report(Counter(get=3), 1.0, 2, [4, 5]))
    assert b'"quiescent_through":null,"job":null}' in encode(busy)
    earlier = encode(busy).replace(b',"quiescent_through":null,"job":null}', b"}")
    decoded = decode_node_record(earlier, key=KEY, node=NODE)
    assert decoded == busy and decoded.report is not None
    assert decoded.report.quiescent_through is None
    with pytest.raises(CorruptRecord):  # an unknown field is neither shape
        decode_node_record(earlier.replace(b"}}", b',"quiet":1}}', 1), key=KEY, node=NODE)
    with pytest.raises(CorruptRecord):  # a float is no u64 in either shape
        decode_node_record(body.replace(b":17,", b":17.0,"), key=KEY, node=NODE)


def test_ml12_a_report_carries_a_jobs_figures_and_one_written_before_them_still_decodes() -> None:
    """The report's `job` (late events and dead letters) is optional with a default: a report
    written before it existed (with `quiescent_through`) decodes with it None, a record
    carrying it round-trips, and bytes that are neither shape are refused."""
    figures = JobReport(late_events=12, dead_letters=3)
    record = _record(node_report(Counter(get=3), 1.0, 2, [4, 5], 17, figures))
    body = encode_node_record(record, key=KEY, node=NODE)
    assert body.endswith(b'"quiescent_through":17,"job":{"late_events":12,"dead_letters":3}}}')
    assert decode_node_record(body, key=KEY, node=NODE) == record
    without = _record(node_report(Counter(get=3), 1.0, 2, [4, 5], 17))
    earlier = encode(without).replace(b',"job":null}', b"}")
    assert earlier.endswith(b'"quiescent_through":17}}')
    assert decode_node_record(earlier, key=KEY, node=NODE) == without
    with pytest.raises(CorruptRecord):  # a negative count is no u64
        decode_node_record(body.replace(b":12,", b":-12,"), key=KEY, node=NODE)
    with pytest.raises(CorruptRecord):  # a figure missing is neither shape
        decode_node_record(body.replace(b',"dead_letters":3', b""), key=KEY, node=NODE)


def test_ml12_a_store_holding_a_version_1_record_starts_over_it() -> None:
    async def main() -> None:
        store = open_store("memory://")
        lease = ProcessLease(node=NODE, owner=_uuid(1), term=3, seq=9, expires_at_ms=0)
        old = _v1(lease, NodeState.LEFT)
        await store.put(KEY, encode(old), OVERWRITE)
        holder = ProcessLeaseHolder(store, SimulatedClock(seed=1), NODE, ttl_s=2.0)
        acquired = await holder.acquire(deadline=FAR)
        assert acquired.record.version == 2 and acquired.record.lease.term == 4
        assert acquired.predecessor is not None and acquired.predecessor.lease == lease

    asyncio.run(main())


def _uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _v1(lease: ProcessLease, state: NodeState) -> NodeLeaseRecordV1:
    return NodeLeaseRecordV1(
        version=1,
        lease=lease,
        state=state,
        ttl_ms=2000,
        nonce=_uuid(2),
        failure_domain=None,
        takeovers=(),
    )


def _record(report: NodeReport | None) -> NodeLeaseRecord:
    return NodeLeaseRecord(
        version=2,
        lease=ProcessLease(node=NODE, owner=_uuid(1), term=1, seq=1, expires_at_ms=0),
        state=NodeState.ACTIVE,
        ttl_ms=2000,
        nonce=_uuid(2),
        failure_domain=None,
        takeovers=(),
        report=report,
    )
