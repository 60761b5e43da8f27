"""4 spawned processes x 50 compare-and-swap increments on the S3 test server end at exactly 200."""

from __future__ import annotations

import asyncio
import json
import multiprocessing

import pytest

from laminar_cluster.store import CREATE, open_store
from tests.processes.url_workers import counter_body, increment_from_url

PROCESSES = 4
INCREMENTS = 50


@pytest.mark.s3
@pytest.mark.processes
def test_four_processes_increment_one_s3_counter_exactly(s3_url: str) -> None:
    key = "counter/value.json"
    asyncio.run(open_store(s3_url).put(key, counter_body(0), CREATE))
    context = multiprocessing.get_context("spawn")  # obstore is not fork-safe
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(
            target=increment_from_url,
            args=(s3_url, key, INCREMENTS, 20_000, barrier, results),
        )
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert [error for _, error in reports] == [None] * PROCESSES
    written = sorted(value for values, _ in reports for value in values)
    # Every successful CAS wrote a distinct next value: no lost and no doubled increment.
    assert written == list(range(1, PROCESSES * INCREMENTS + 1))
    final = asyncio.run(open_store(s3_url).get(key))
    assert json.loads(final.body)["value"] == PROCESSES * INCREMENTS
