"""Each layer imports only the layers below it (DESIGN.md's order, clock first).

The clock sits at the bottom, below the store: the store's fault wrapper needs time and
randomness, and those come only through the clock (STYLE.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import laminar_cluster

PACKAGE_ROOT = Path(laminar_cluster.__file__).parent

# Bottom up. A layer may import any layer before it in this list, never one after it.
LAYERS = [
    "errors",
    "clock",
    "store",
    "codec",
    "fencing",
    "checkpoint",
    "lease",
    "authority",
    "membership",
    "assignment",
    "rebalance",
    "coordinator",
    "jobs",
    "connectors",
    "runtime",
    "metrics",
    "views",
    "console",
    "harness",
    "bench",
    "cli",
]


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "laminar_cluster" or len(parts) < 2:
        return None
    return parts[1]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_every_package_is_a_known_layer() -> None:
    packages = {p.name for p in PACKAGE_ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"}
    modules = {p.stem for p in PACKAGE_ROOT.glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= set(LAYERS), (packages | modules) - set(LAYERS)


def test_no_layer_imports_a_layer_above_it() -> None:
    violations = []
    for path in PACKAGE_ROOT.rglob("*.py"):
        own = path.relative_to(PACKAGE_ROOT).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for module in imports_of(path):
            other = layer_of(module)
            if other is None or other == own:
                continue
            if LAYERS.index(other) > LAYERS.index(own):
                violations.append(f"{path.relative_to(PACKAGE_ROOT)} imports {module}")
    assert violations == []
