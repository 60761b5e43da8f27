"""`laminar-cluster bench cost --json`, run as a user runs it (the installed console script in a
subprocess), briefly on a fresh file:// store: both phases are there, their figures add up (the
kinds and the protocols to the total, the nodes to the cluster), the prices follow from the
counts and the price flags, and a busy phase counts its checkpoints. Never a timing assertion.
A store that holds anything is refused before a node starts."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.bench.cost_figures import KINDS, MONTH_S, PROTOCOLS
from laminar_cluster.store import CREATE, open_store

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")
PUT_PRICE, GET_PRICE = 0.01, 0.001  # per 1,000: not the defaults, so the flags must be used
NODES = 3


def _bench(store: Path, *extra: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    args = ["bench", "cost", "--store", f"file://{store}", "--json", *extra]
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _check_phase(phase: dict[str, Any]) -> None:
    requests, per_s, usd = phase["requests"], phase["per_s"], phase["usd_per_node_month"]
    assert list(requests["by_protocol"]) == list(PROTOCOLS)
    assert sum(requests["by_kind"].values()) == requests["total"] > 0
    by_protocol = requests["by_protocol"]
    assert sum(sum(row.values()) for row in by_protocol.values()) == requests["total"]
    for kind in KINDS:
        assert sum(row[kind] for row in by_protocol.values()) == requests["by_kind"][kind]
    assert sum(node["requests"] for node in phase["nodes"]) == requests["total"]
    assert [node["node"] for node in phase["nodes"]] == [1, 2, 3]
    # Rates: the protocols and the kinds add up to the total (each rounded to 3 decimals).
    assert sum(per_s["by_kind"].values()) == pytest.approx(per_s["total"], abs=0.01)
    assert sum(per_s["by_protocol"].values()) == pytest.approx(per_s["total"], abs=0.01)
    assert sum(n["per_s"][k] for n in phase["nodes"] for k in KINDS) == pytest.approx(
        per_s["total"], abs=0.02
    )
    # Prices: each kind's rate at its list price, over a 30-day month, spread over the nodes.
    price = {k: (GET_PRICE if k in ("get", "head") else PUT_PRICE) / 1000 for k in KINDS}
    expected = sum(per_s["by_kind"][k] * price[k] for k in KINDS) * MONTH_S / NODES
    assert usd["total"] == pytest.approx(expected, rel=1e-3, abs=0.05)
    assert sum(usd["by_protocol"].values()) == pytest.approx(usd["total"], abs=0.01)
    for protocol in PROTOCOLS:
        rates = per_s["by_protocol_kind"][protocol]
        dollars = sum(rates[k] * price[k] for k in KINDS) * MONTH_S / NODES
        assert usd["by_protocol"][protocol] == pytest.approx(dollars, rel=1e-3, abs=0.05)
    assert sum(n["usd_per_month"] for n in phase["nodes"]) / NODES == pytest.approx(
        usd["total"], rel=1e-3, abs=0.05
    )
    # The same requests, by the object family each named: they add up to the total too.
    by_object = requests["by_object"]
    assert sum(sum(row.values()) for row in by_object.values()) == requests["total"]
    assert {"membership", "control"} <= set(by_object)
    checkpoints = phase["checkpoints"]
    if checkpoints["committed"]:
        checkpoint_requests = sum(by_protocol["checkpoint"].values())
        assert checkpoints["requests_per_checkpoint"] == round(
            checkpoint_requests / checkpoints["committed"], 1
        )
        on_objects = sum(by_object["checkpoints"].values())
        assert checkpoints["checkpoint_objects_per_checkpoint"] == round(
            on_objects / checkpoints["committed"], 1
        )


@pytest.mark.processes
def test_bench_cost_json_figures_add_up(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    extra = ["--idle-s", "4", "--busy-s", "8", "--checkpoint-interval", "2"]
    extra += ["--partitions", "16", "--events-per-s", "400", "--batch-s", "1"]
    extra += ["--put-price", str(PUT_PRICE), "--get-price", str(GET_PRICE)]
    result = _bench(store, *extra, timeout_s=280)
    assert result.returncode == 0, result.stdout + result.stderr
    figures: dict[str, Any] = json.loads(result.stdout)
    assert figures["nodes"] == NODES
    assert figures["prices"]["put_per_1000"] == PUT_PRICE
    assert figures["prices"]["get_per_1000"] == GET_PRICE
    assert figures["node_options"][:2] == ["--checkpoint-interval", "2.0"]
    for name in ("idle", "busy"):
        assert figures[name]["phase"] == name
        _check_phase(figures[name])
    limits = {name: row["max"] for name, row in figures["targets"].items()}
    assert limits == {
        "idle_usd_per_node_month": 20.0,
        "busy_usd_per_node_month": 40.0,
        "checkpoint_objects_per_checkpoint": 3 * NODES + 10,
    }
    for row in figures["targets"].values():
        assert row["met"] == (row["value"] <= row["max"])
    busy = figures["busy"]
    assert busy["producer"]["events"] > 0
    assert busy["checkpoints"]["committed"] >= 1
    assert busy["requests"]["by_protocol"]["checkpoint"]["put"] > 0  # partials were written
    assert busy["requests"]["by_protocol"]["engine source"]["get"] > 0  # batches were read


def test_bench_cost_refuses_a_store_that_holds_anything(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()

    async def put_one() -> None:
        opened = open_store(f"file://{store}")
        try:
            await opened.put("events/layout.json", b"{}", CREATE)
        finally:
            await opened.close()

    asyncio.run(put_one())
    result = _bench(store, "--idle-s", "1", "--busy-s", "1", timeout_s=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "needs an empty store (it holds events/layout.json)" in result.stdout + result.stderr
