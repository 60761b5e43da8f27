"""Failure-domain locality and placement metrics values (AS §3.2, AS §3.4).

Locality never affects placement (AS §3.1); it only groups owners for the metrics. The values here
are plain data; publishing them as Prometheus gauges comes with the metrics layer. The successor
roster helpers of AS §3.2 live in `rendezvous` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from laminar_cluster.assignment.rendezvous import (
    successor_participant_ids,
    successor_participants,
)

__all__ = [
    "UNKNOWN_DOMAIN_LABEL",
    "Locality",
    "PlacementMetrics",
    "owners_per_domain",
    "placement_metrics",
    "successor_participant_ids",
    "successor_participants",
]

UNKNOWN_DOMAIN_LABEL = "unknown"


@dataclass(frozen=True, slots=True)
class Locality:
    """Failure-domain tiers, coarsest first (`region=…;zone=…;rack=…`)."""

    tiers: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Locality:
        """Split on `;`, trim, drop empty segments; `name=value` contributes `value` (AS §3.4)."""
        tiers: list[str] = []
        for raw in text.split(";"):
            segment = raw.strip()
            if not segment:
                continue
            _, equals, value = segment.partition("=")
            tiers.append(value.strip() if equals else segment)
        return cls(tuple(tiers))

    def domain_at(self, tier: int) -> str:
        """The tiers 0..=min(tier, len-1) joined by `;`, or "" with no tiers."""
        if not self.tiers:
            return ""
        return ";".join(self.tiers[: min(tier, len(self.tiers) - 1) + 1])


def owners_per_domain(
    owners: Sequence[int], nodes: Iterable[tuple[int, Locality]], tier: int
) -> dict[str, int]:
    """Vnodes per domain at `tier`, sorted by domain; an owner not in `nodes` counts under ""."""
    domain_of: Mapping[int, str] = {node: locality.domain_at(tier) for node, locality in nodes}
    counts: dict[str, int] = {}
    for owner in owners:
        domain = domain_of.get(owner, "")
        counts[domain] = counts.get(domain, 0) + 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class PlacementMetrics:
    """`placement_vnodes_per_domain{domain}` series (the complete set: publishing replaces every
    earlier series) and `placement_blast_radius_ratio`."""

    vnodes_per_domain: dict[str, int]
    blast_radius_ratio: float


def placement_metrics(
    owners: Sequence[int], nodes: Iterable[tuple[int, Locality]], tier: int
) -> PlacementMetrics:
    """AS §3.4 `publish_placement_metrics` values: "" is labelled `unknown`; the ratio is the
    largest domain's share of max(len(owners), 1), 0 with no counts."""
    counts = owners_per_domain(owners, nodes, tier)
    total = max(len(owners), 1)
    labelled = {(domain or UNKNOWN_DOMAIN_LABEL): count for domain, count in counts.items()}
    ratio = max(counts.values()) / total if counts else 0.0
    return PlacementMetrics(vnodes_per_domain=labelled, blast_radius_ratio=ratio)
