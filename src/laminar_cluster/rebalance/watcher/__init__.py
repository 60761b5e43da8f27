"""The follower side: the snapshot watcher that every node runs, which adopts only what it
audited against the authority, acks drains and republishes its vnode state."""
