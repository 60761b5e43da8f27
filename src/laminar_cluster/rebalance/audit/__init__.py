"""Audits of assignment generations against the leader authority, shared by every role: does a
drain or recovery generation carry the durable decision it needs, does it bind this process,
and the owner certificate of an owner map."""
