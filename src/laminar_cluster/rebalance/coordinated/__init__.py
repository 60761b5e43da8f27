"""Coordinated recovery of a drain whose ack quorum was missed (stopped recovery) and the hooks
that settle a source drain before a recovery release."""
