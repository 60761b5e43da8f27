"""laminar-cluster: the cluster control plane of a partitioned, exactly-once stream processor."""

__version__ = "0.1.0"
