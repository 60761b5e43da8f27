"""Prometheus metrics of one node process: `NodeMetrics` on its own registry, the counting
store wrapper `MetricsStore`, and `serve` for the HTTP exposition (issue 7, `--metrics-port`)."""

from laminar_cluster.metrics.counted_store import MetricsStore
from laminar_cluster.metrics.node_metrics import CHECKPOINT_FAILED, NodeMetrics
from laminar_cluster.metrics.server import MetricsServer, serve

__all__ = ["CHECKPOINT_FAILED", "MetricsServer", "MetricsStore", "NodeMetrics", "serve"]
