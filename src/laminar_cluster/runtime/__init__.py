"""The node runtime: engine interface, reference engine, event log and sink (issue 7)."""
