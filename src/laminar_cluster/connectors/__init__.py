"""Sources and sinks, with I/O: the store's event log (`eventlog`) and its public `Producer`,
source declarations (`sources`)."""
