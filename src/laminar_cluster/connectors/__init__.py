"""Sources and sinks, with I/O: what brings events into a job and takes its output out.

Every sink applies one participant's output of one committed checkpoint (a `Delivery`) exactly
once through a `SinkWriter`."""

from laminar_cluster.connectors.delivery import Delivery, SinkWriter

__all__ = ["Delivery", "SinkWriter"]
