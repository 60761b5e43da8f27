"""Sources and sinks of jobs, with I/O (issue 16): what a sink receives (`Delivery`), the
interface of sink writers (`SinkWriter`), and the exactly-once file sinks."""

from laminar_cluster.connectors.delivery import Delivery, SinkWriter
from laminar_cluster.connectors.files import FileSinkWriter, JsonLinesSink, ParquetSink

__all__ = ["Delivery", "FileSinkWriter", "JsonLinesSink", "ParquetSink", "SinkWriter"]
