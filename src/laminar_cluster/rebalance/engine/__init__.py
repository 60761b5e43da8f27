"""The engine seam (docs/embedding.md): `BaseEngine`, the `RebalanceEngine` of every process;
the `DataPlane` facade an embedded engine implements and the `VnodeHost` that runs it (restores,
drain pauses, held cuts); source-drain receipts, adoption rules and the handoff checkpoint of a
process without a data plane."""
