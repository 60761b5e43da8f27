"""Store request rates by kind, per node and for the cluster, from the reports the nodes'
process lease records carry (membership.records.NodeReport; docs/protocols/membership.md ML-12).

A report holds cumulative counts and the milliseconds they cover on the node's own monotonic
clock. `RequestRates.observe` keeps the last report of each incarnation (node, boot, term); once
a newer report of the same incarnation arrives (a renewal, every ttl/4), the rate is the
difference of the counts over the difference of `counted_ms`, with no wall clock involved
(basis `interval`). Before that, and after a restart, the rate is the average since the process
began counting (basis `since start`). Members that left or are dead are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from laminar_cluster.membership.discovery import Member
from laminar_cluster.membership.records import StoreRequestCounts

OPS: Final = ("get", "head", "put", "list", "delete")
# A one-shot reader's second read of the members comes this much past the longest renewal
# interval of the members that report (nodes renew every ttl / 4), and never later than
# SECOND_READ_S_MAX.
SECOND_READ_MARGIN: Final = 1.25
SECOND_READ_S_MAX: Final = 10.0


@dataclass(frozen=True, slots=True)
class _Sample:
    incarnation: tuple[str, int]  # (boot, term)
    counts: tuple[int, ...]  # in OPS order
    counted_ms: int


def _sample(member: Member, requests: StoreRequestCounts) -> _Sample:
    return _Sample(
        incarnation=(member.boot, member.term),
        counts=tuple(getattr(requests, op) for op in OPS),
        counted_ms=requests.counted_ms,
    )


@dataclass
class RequestRates:
    """One reader's memory of the nodes' last reports (keep one per watch)."""

    _last: dict[int, _Sample] = field(default_factory=dict)
    _rates: dict[int, dict[str, Any]] = field(default_factory=dict)

    def observe(self, members: Sequence[Member]) -> dict[str, Any]:
        """Per-node rates (requests per second by kind) and their sum over live members."""
        rows = []
        for member in members:
            report = member.record.report
            if report is None or not member.live:
                continue
            sample = _sample(member, report.requests)
            previous = self._last.get(member.node)
            if previous != sample:
                self._rates[member.node] = _rate(previous, sample)
                self._last[member.node] = sample
            rows.append({"node": member.node, **self._rates[member.node]})
        total = {op: round(sum(row["per_s"][op] for row in rows), 3) for op in OPS}
        return {"nodes": rows, "total_per_s": total, "kinds": list(OPS)}


def _rate(previous: _Sample | None, sample: _Sample) -> dict[str, Any]:
    """Over the interval since `previous` when it is an older report of the same incarnation,
    else the average since the process began counting."""
    interval = (
        previous is not None
        and previous.incarnation == sample.incarnation
        and sample.counted_ms > previous.counted_ms
        and all(b >= a for a, b in zip(previous.counts, sample.counts, strict=True))
    )
    if interval:
        assert previous is not None
        span_ms = sample.counted_ms - previous.counted_ms
        deltas = [b - a for a, b in zip(previous.counts, sample.counts, strict=True)]
        basis = "interval"
    else:
        span_ms, deltas, basis = sample.counted_ms, list(sample.counts), "since start"
    per_s = {
        op: round(d * 1000 / span_ms, 3) if span_ms else 0.0
        for op, d in zip(OPS, deltas, strict=True)
    }
    return {"basis": basis, "span_ms": span_ms, "per_s": per_s}


def second_read_wait_s(members: Iterable[Member]) -> float | None:
    """How long a one-shot reader waits before reading the members again, so that each live
    node reporting requests renews (and reports) once in between: a little over the longest
    renewal interval among them, at most `SECOND_READ_S_MAX`; None when none reports."""
    ttls_ms = [m.record.ttl_ms for m in members if m.live and m.record.report is not None]
    if not ttls_ms:
        return None
    return min(max(ttls_ms) / 4 / 1000 * SECOND_READ_MARGIN, SECOND_READ_S_MAX)
