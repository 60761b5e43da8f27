"""Sources and sinks of jobs, with I/O (issue 16): what a sink receives (`Delivery`) and the
interface of sink writers (`SinkWriter`)."""

from laminar_cluster.connectors.delivery import Delivery, SinkWriter

__all__ = ["Delivery", "SinkWriter"]
