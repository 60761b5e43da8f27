"""The arithmetic of `bench cost`: request counts by purpose and kind, turned into requests per
second by kind and by protocol, and into a monthly price at S3 list prices. Pure functions.

A node counts its own requests by the purpose of the task that made them
(`rebalance.node.stats`); `PROTOCOL_OF_PURPOSE` groups the purposes by the protocol they serve:

| protocol | purposes (the node's tasks) |
| --- | --- |
| lease | `leadership`: the leader lease manager (renewals, observation, takeovers) |
| membership | `lease` (the process lease renewals), `membership` (discovery), `leave` |
| watcher | `watcher`: the assignment snapshot watcher |
| checkpoint | `duties` (the leader's checkpoints and seed), `participant`, `restore` |
| engine source | `engine`: the reference engine's event log reads |
| retention | `retention`: the checkpoint leader's retention walk and artifact floor |
| other | everything else (`rebalance`, `observer`, startup, unnamed) |

Prices: S3 Standard list prices by default, PUT, COPY, POST and LIST $0.005 per 1,000 and
GET and HEAD $0.0004 per 1,000, over a 30-day month. A `delete` is priced as a POST: obstore
sends a single delete as a one-key multi-object delete (a POST), and `delete_many` is counted
as the multi-object deletes S3 bills (`store.api.delete_requests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from laminar_cluster.errors import InvalidArgument

KINDS: Final = ("get", "head", "put", "list", "delete")
PROTOCOLS: Final = (
    "lease",
    "membership",
    "watcher",
    "checkpoint",
    "engine source",
    "retention",
    "other",
)
PROTOCOL_OF_PURPOSE: Final = {
    "leadership": "lease",
    "lease": "membership",
    "membership": "membership",
    "leave": "membership",
    "watcher": "watcher",
    "duties": "checkpoint",
    "participant": "checkpoint",
    "restore": "checkpoint",
    "engine": "engine source",
    "retention": "retention",
}
MONTH_S: Final = 30 * 24 * 3600
CHECKPOINT_OBJECTS: Final = "checkpoints"  # the object family of the checkpoint protocol
IDLE_USD_MAX: Final = 20.0  # per node per month (issue 15 "What must show")
BUSY_USD_MAX: Final = 40.0
# Counts by purpose, then by kind: what a node's `requests` log event carries as `counts`.
Counts = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per 1,000 requests (S3 Standard list prices by default)."""

    put_per_1000: float = 0.005  # PUT, COPY, POST, LIST; our deletes are POSTs (module doc)
    get_per_1000: float = 0.0004  # GET, HEAD

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value >= 0:
                raise InvalidArgument(f"price {name} must be >= 0, not {value!r}")

    def per_request(self, kind: str) -> float:
        """Dollars for one request of `kind`."""
        if kind not in KINDS:
            raise InvalidArgument(f"unknown request kind {kind!r}; known: {', '.join(KINDS)}")
        per_1000 = self.get_per_1000 if kind in ("get", "head") else self.put_per_1000
        return per_1000 / 1000

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "month_s": MONTH_S, "delete_priced_as": "POST"}


def protocol_of(purpose: str) -> str:
    return PROTOCOL_OF_PURPOSE.get(purpose, "other")


def difference(after: Counts, before: Counts) -> dict[str, dict[str, int]]:
    """`after - before` per (purpose, kind); InvalidArgument if a count went down (the two are
    not of one process)."""
    delta: dict[str, dict[str, int]] = {}
    for purpose, kinds in after.items():
        for kind, count in kinds.items():
            change = count - before.get(purpose, {}).get(kind, 0)
            if change < 0:
                raise InvalidArgument(f"count {purpose}.{kind} went down from {count - change}")
            if change:
                delta.setdefault(purpose, {})[kind] = change
    return delta


def by_protocol(counts: Counts) -> dict[str, dict[str, int]]:
    """Counts by protocol, then kind: every protocol and every kind present (zeros too)."""
    table = {protocol: dict.fromkeys(KINDS, 0) for protocol in PROTOCOLS}
    for purpose, kinds in counts.items():
        row = table[protocol_of(purpose)]
        for kind, count in kinds.items():
            if kind not in row:
                raise InvalidArgument(f"unknown request kind {kind!r} under {purpose!r}")
            row[kind] += count
    return table


def _rates(table: Mapping[str, Mapping[str, int]], window_s: float) -> dict[str, dict[str, float]]:
    return {p: {k: n / window_s for k, n in kinds.items()} for p, kinds in table.items()}


def _price_per_s(rates: Mapping[str, Mapping[str, float]], prices: Prices) -> dict[str, float]:
    return {
        p: sum(rate * prices.per_request(k) for k, rate in kinds.items())
        for p, kinds in rates.items()
    }


@dataclass(frozen=True, slots=True)
class NodeWindow:
    """One node's requests over its own window of the phase (two `requests` events apart)."""

    node: int
    window_s: float
    counts: dict[str, dict[str, int]]  # by purpose, then kind
    objects: dict[str, dict[str, int]] = field(default_factory=dict)  # by object family, kind

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise InvalidArgument(f"node {self.node}: window of {self.window_s} s")


def _rounded(table: Mapping[str, float], digits: int = 3) -> dict[str, float]:
    return {name: round(value, digits) for name, value in table.items()}


def _summed(tables: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    total = {p: dict.fromkeys(KINDS, 0.0) for p in PROTOCOLS}
    for table in tables:
        for protocol, kinds in table.items():
            for kind, value in kinds.items():
                total[protocol][kind] += value
    return total


def _by_kind(table: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {kind: sum(row[kind] for row in table.values()) for kind in KINDS}


def _node_row(window: NodeWindow, prices: Prices) -> tuple[dict[str, Any], dict[str, Any]]:
    """One node's figures, and its rates by protocol and kind."""
    table = by_protocol(window.counts)
    rates = _rates(table, window.window_s)
    usd_per_s = sum(_price_per_s(rates, prices).values())
    row = {
        "node": window.node,
        "window_s": round(window.window_s, 3),
        "requests": sum(sum(kinds.values()) for kinds in table.values()),
        "per_s": _rounded(_by_kind(rates)),
        "usd_per_month": round(usd_per_s * MONTH_S, 3),
    }
    return row, {"counts": table, "rates": rates}


def phase_figures(windows: list[NodeWindow], prices: Prices, *, checkpoints: int) -> dict[str, Any]:
    """A phase's figures: per node, then the cluster's requests (counts over each node's
    window, and rates: the sum of the nodes' rates) by protocol and kind, the price per node
    and month (the cluster's price spread evenly over its nodes), the counts by object family,
    and the requests per committed checkpoint (`_per_checkpoint`)."""
    if not windows:
        raise InvalidArgument("a phase needs at least one node window")
    rows, parts = zip(*(_node_row(window, prices) for window in windows), strict=True)
    counts = _summed([part["counts"] for part in parts])
    rates = _summed([part["rates"] for part in parts])
    usd_per_s = _price_per_s(rates, prices)
    nodes = len(windows)
    objects: dict[str, dict[str, int]] = {}
    for window in windows:
        for family, kinds in window.objects.items():
            row = objects.setdefault(family, dict.fromkeys(KINDS, 0))
            for kind, count in kinds.items():
                row[kind] += count
    return {
        "nodes": list(rows),
        "window_s": round(sum(w.window_s for w in windows) / nodes, 3),
        "requests": {
            "by_protocol": {
                p: {k: int(n) for k, n in kinds.items()} for p, kinds in counts.items()
            },
            "by_kind": {k: int(n) for k, n in _by_kind(counts).items()},
            "by_object": dict(sorted(objects.items())),
            "total": int(sum(_by_kind(counts).values())),
        },
        "per_s": {
            "by_protocol": _rounded({p: sum(kinds.values()) for p, kinds in rates.items()}),
            "by_kind": _rounded(_by_kind(rates)),
            "by_protocol_kind": {p: _rounded(kinds) for p, kinds in rates.items()},
            "total": round(sum(_by_kind(rates).values()), 3),
        },
        "usd_per_node_month": {
            "by_protocol": _rounded({p: v * MONTH_S / nodes for p, v in usd_per_s.items()}),
            "total": round(sum(usd_per_s.values()) * MONTH_S / nodes, 3),
        },
        "checkpoints": _per_checkpoint(counts, objects, checkpoints),
    }


def _per_checkpoint(
    counts: Mapping[str, Mapping[str, float]],
    objects: Mapping[str, Mapping[str, int]],
    checkpoints: int,
) -> dict[str, Any]:
    """Requests per committed checkpoint (None without one): every request of the checkpoint
    tasks (authority and decision store reads included), with retention's too, and the
    requests on the checkpoint protocol's own objects (`checkpoints/...`, by any task: what
    distributed-checkpoint.md's budget, 3P + 10, counts; the pointer's polls, family
    `checkpoints/pointer`, are a per-second cost and apart)."""

    def per(total: float) -> float | None:
        return None if checkpoints <= 0 else round(total / checkpoints, 1)

    tasks = sum(counts["checkpoint"].values())
    return {
        "committed": checkpoints,
        "requests_per_checkpoint": per(tasks),
        "requests_per_checkpoint_with_retention": per(tasks + sum(counts["retention"].values())),
        "checkpoint_objects_per_checkpoint": per(sum(objects.get(CHECKPOINT_OBJECTS, {}).values())),
    }


def targets(idle: dict[str, Any], busy: dict[str, Any], nodes: int) -> dict[str, Any]:
    """Issue 15's bounds and whether this run met them: idle at most $20 and busy at most $40
    per node per month, at most 3P + 10 requests on the checkpoint protocol's objects per
    checkpoint (busy; distributed-checkpoint.md's budget)."""
    per_checkpoint = busy["checkpoints"]["checkpoint_objects_per_checkpoint"]
    bounds = {
        "idle_usd_per_node_month": (idle["usd_per_node_month"]["total"], IDLE_USD_MAX),
        "busy_usd_per_node_month": (busy["usd_per_node_month"]["total"], BUSY_USD_MAX),
        "checkpoint_objects_per_checkpoint": (per_checkpoint, 3 * nodes + 10),
    }
    return {
        name: {"value": value, "max": bound, "met": None if value is None else value <= bound}
        for name, (value, bound) in bounds.items()
    }
