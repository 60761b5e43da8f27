"""The leader authority (spec_leader_lease): one append-only log of create-only records plus a
compare-and-swap head pointer; fencing tokens; leader decisions admitted through the same log."""
