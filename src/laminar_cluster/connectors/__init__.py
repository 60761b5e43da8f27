"""Sources and sinks of jobs, with I/O (docs/jobs.md): the store's event log (`eventlog`) and
its public `Producer`, source declarations (`sources`), file sources' catalog and formats
(`file_catalog`, `file_formats`) and the repartition of their events (`exchange`), what a sink
receives (`Delivery`) and the
interface of sink writers (`SinkWriter`, `delivery`), the exactly-once file sinks (`files`:
Parquet, JSON Lines) and the PostgreSQL sink (`postgres`). The public names are exported from
`laminar_cluster` itself."""
