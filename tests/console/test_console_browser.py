"""The console in a real headless browser (issue 17): Debian's Chromium driven by selenium
through /usr/bin/chromedriver, against a live cluster of real `laminar-cluster node` processes
on a file:// store and a real `laminar-cluster console` process.

The page shows the three members and the leader; after the leader is SIGKILLed it shows
another leader; after a fourth node starts, vnodes move to it in the heatmap. The screenshot
test saves a PNG of the page, checks it is a real PNG of the page's size and that every section
rendered, and prints its path. `make test` installs the browser (apt packages `chromium
chromium-driver`); without it these tests fail, they never skip.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from laminar_cluster.harness.fleet import NodeFleet, NodeTimings

CHROMIUM: Final = "/usr/bin/chromium"
CHROMEDRIVER: Final = "/usr/bin/chromedriver"
WINDOW: Final = (1400, 2000)
# ttl 5 s (the stream nodes' default): a SIGKILLed leader is replaced within seconds, and a
# renewal survives a host loaded by the rest of the suite (3 s fenced nodes under load).
TIMINGS: Final = NodeTimings(ttl_s=5.0, poll_s=0.2, debounce_s=0.5, drain_ack_timeout_s=15.0)
WORKLOAD: Final = ("--events", "20000", "--partitions", "8", "--keys", "200", "--seed", "3")
STEP_S: Final = 90.0  # a bound on each wait; an unloaded host needs a few seconds
PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"

pytestmark = [pytest.mark.processes, pytest.mark.browser]


@dataclass
class Live:
    """The cluster, the console process and the browser on its page."""

    fleet: NodeFleet
    url: str
    driver: WebDriver
    screenshots: Path

    def text(self, css: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def attribute(self, css: str, name: str) -> str:
        value = self.driver.find_element(By.CSS_SELECTOR, css).get_attribute(name)
        return "" if value is None else str(value)

    def script(self, code: str) -> Any:
        return self.driver.execute_script(code)

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + STEP_S
        while not check():
            if time.monotonic() >= deadline:
                print(self.fleet.tail(30))
                raise AssertionError(f"the page never showed {what} within {STEP_S} s")
            time.sleep(0.25)

    def leader(self) -> int | None:
        node = self.attribute("#leader", "data-leader-node")
        return int(node) if node else None

    def members(self) -> dict[int, str]:
        rows = self.script(
            "return [...document.querySelectorAll('#members tbody tr')]"
            ".map(r => [Number(r.dataset.node), r.dataset.state])"
        )
        return {int(node): str(state) for node, state in rows}

    def owners(self) -> list[int]:
        cells = self.script(
            "return [...document.querySelectorAll('#heatmap .cell')].map(c => c.dataset.owner)"
        )
        return [int(owner) for owner in cells]


def _browser(profile: Path) -> WebDriver:
    """Debian's Chromium, headless, with nothing that reaches the network, on a fresh
    profile directory."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), f"{path} is missing: `make test` installs it"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


def _run_cli(store_url: str, *args: str) -> None:
    command = [sys.executable, "-m", "laminar_cluster.cli", *args[:1], "--store", store_url]
    done = subprocess.run(
        [*command, *args[1:]], capture_output=True, text=True, timeout=STEP_S, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("console")
    (root / "store").mkdir()
    store_url = f"file://{root / 'store'}?fsync=false"
    _run_cli(store_url, "produce", *WORKLOAD)
    profile = root / "chromium-profile"  # a fresh --user-data-dir for this run
    with NodeFleet(store_url, root, TIMINGS) as fleet:
        for node in (1, 2, 3):
            fleet.start(node)
        command = [sys.executable, "-m", "laminar_cluster.cli", "console", "--store", store_url]
        console = subprocess.Popen(
            [*command, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            line = console.stdout.readline() if console.stdout is not None else ""
            assert " at http://127.0.0.1:" in line, line
            url = line.rsplit(" at ", 1)[1].strip()
            driver = _browser(profile)
            try:
                driver.get(url)
                yield Live(fleet=fleet, url=url, driver=driver, screenshots=root)
            finally:
                driver.quit()
        finally:
            console.send_signal(signal.SIGTERM)
            console.wait(timeout=10)
            assert console.returncode == 0


def test_the_page_follows_the_leader_through_a_sigkill_and_vnodes_to_a_new_node(
    live: Live,
) -> None:
    def three_active_and_a_leader() -> bool:
        members = live.members()
        return members == {1: "active", 2: "active", 3: "active"} and live.leader() in members

    live.wait("three active members and their leader", three_active_and_a_leader)
    live.wait("256 vnodes spread over the three", lambda: set(live.owners()) == {1, 2, 3})
    assert len(live.owners()) == 256
    first = live.leader()
    assert first is not None
    assert live.text("#leader").startswith(f"node {first} leads with fencing token")

    run = live.fleet.current(first)
    assert run is not None and run.alive
    run.process.kill()  # SIGKILL: no leave, the lease simply stops being renewed
    live.wait("another leader", lambda: live.leader() not in (None, first))
    # Dead once unrenewed for a ttl, and still dead (never `left`, which a graceful leave
    # means) after the new leader's takeover of its process lease.
    live.wait(f"node {first} dead", lambda: live.members().get(first) == "dead")
    second = live.leader()
    tokens = live.script(
        "return [...document.querySelectorAll('#terms .term')].map(t => Number(t.dataset.token))"
    )
    assert len(tokens) >= 2 and tokens == sorted(tokens), tokens  # the token timeline grew

    live.fleet.start(4)
    live.wait("vnodes owned by node 4 in the heatmap", lambda: 4 in live.owners())
    live.wait("node 4 active", lambda: live.members().get(4) == "active")
    assert live.leader() is not None and second is not None
    assert live.members().get(first) == "dead"  # taken over since, and still not `left`


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_screenshot_of_the_page(live: Live) -> None:
    live.wait(
        "every section rendered",
        lambda: bool(
            live.script(
                "return document.querySelectorAll('#heatmap .cell').length === 256"
                " && document.querySelectorAll('#members tbody tr').length >= 3"
                " && document.querySelectorAll('#checkpoints .bar').length > 0"
                " && document.querySelectorAll('#rates .row').length === 5"
                " && document.querySelectorAll('#terms .term').length > 0"
                " && document.getElementById('lag').textContent.includes('events behind')"
            )
        ),
    )
    path = live.screenshots / "console.png"
    assert live.driver.save_screenshot(str(path))
    data = path.read_bytes()
    width, height = _png_size(data)
    viewport = live.script(
        "return [window.innerWidth * devicePixelRatio, window.innerHeight * devicePixelRatio]"
    )
    assert (width, height) == (int(viewport[0]), int(viewport[1]))
    assert width >= 800 and height >= 600 and len(data) > 10_000
    for section in ("leader", "members", "vnodes", "assignment", "checkpoints", "lag", "rates"):
        assert live.text(f"#{section}-section h2"), section
    cost = live.script("return document.getElementById('cost').textContent")
    print(f"\nconsole screenshot: {path}\n{cost}")


def _document(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}api/cluster", timeout=10) as response:
        document: dict[str, Any] = json.loads(response.read())
    return document


def test_a_refresh_costs_what_docs_console_md_says(live: Live) -> None:
    """Steady state: 15 + members + index shards requests, plus about 5 per checkpoint and 2 per
    assignment decision that is new since the previous refresh (docs/console.md "Cost")."""
    before = _document(live.url)
    time.sleep(1.2)  # past the console's refresh interval: the next answer is a new read
    after = _document(live.url)
    assert after["observed_at_ms"] > before["observed_at_ms"]
    new_checkpoints = len(
        {row["epoch"] for row in after["history"]["checkpoints"]}
        - {row["epoch"] for row in before["history"]["checkpoints"]}
    )
    new_decisions = len(after["history"]["decisions"]) - len(before["history"]["decisions"])
    partitions = len(after["lag"]["partitions"])
    shards = (partitions + 1_023) // 1_024
    bound = 15 + len(after["members"]) + shards + 5 * new_checkpoints + 2 * new_decisions
    cost = after["cost"]
    print(f"\none refresh: {cost} (bound {bound}; {partitions} partitions)")
    assert 0 < cost["total"] <= bound
    assert set(cost["requests"]) <= {"get", "head", "list"}  # never a write


def test_with_every_node_stopped_the_page_says_no_live_leader(live: Live) -> None:
    """Runs last (it stops the cluster): once the head record is older than the lease ttl,
    the page names the last leader as not live and the badge is no longer ok."""
    live.wait("a live leader", lambda: live.leader() is not None)
    for node in (1, 2, 3, 4):
        run = live.fleet.current(node)
        if run is not None and run.alive:
            run.process.kill()
    live.wait("no live leader", lambda: live.text("#leader").startswith("no live leader (last: "))
    assert live.leader() is None
    assert "stale" in live.attribute("#leader", "class")
    live.wait("a badge that is not ok", lambda: live.attribute("#health", "class") == "badge bad")
    assert live.text("#health").startswith("no live leader")
