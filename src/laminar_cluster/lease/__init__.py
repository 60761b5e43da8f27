"""The leader lease and the log it lives in (docs/protocols/leader-authority.md): one append-only
log of create-only records plus a compare-and-swap head pointer, fencing tokens, takeover after
a full TTL of unchanged liveness, and the lease manager. The decisions admitted through the same
log are the `authority` package's."""
