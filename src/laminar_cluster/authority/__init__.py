"""The leader authority's decisions (docs/protocols/leader-authority.md): every decision a leader
takes (cluster checkpoint outcomes and their retention floors, assignment drain and recovery
decisions, recovery faults and releases, the catalog seal) is admitted by an append to the
lease's log under the leader's proof, so a deposed leader's late decision comes back fenced.
Also the audits of what the log holds and the bounded pruning of its history."""
