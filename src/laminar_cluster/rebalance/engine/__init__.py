"""The engine seam: `BaseEngine`, the `RebalanceEngine` a data plane extends, with its source
drains, adoption rules, rotation lock and the handoff checkpoint of a process without a data
plane."""
