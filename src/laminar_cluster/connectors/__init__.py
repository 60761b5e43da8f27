"""Sources and sinks of jobs, with I/O (docs/jobs.md): what a sink receives (`Delivery`), the
interface of sink writers (`SinkWriter`), the exactly-once file sinks (Parquet, JSON Lines) and
the PostgreSQL sink."""

from laminar_cluster.connectors.delivery import Delivery, SinkWriter
from laminar_cluster.connectors.files import FileSinkWriter, JsonLinesSink, ParquetSink

__all__ = ["Delivery", "FileSinkWriter", "JsonLinesSink", "ParquetSink", "SinkWriter"]
