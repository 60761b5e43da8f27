"""Coordinated recovery of dead, quarantined or restarted owners: fence, recovery decision,
the predecessor's in-flight checkpoint settled, cold restore, release."""
