"""`bench files`' parts, fast: the seeded text files and their expected word counts (the counts
equal the words a reader finds in the text, the choice is skewed, the files land one PUT each
under `books/` and as `.txt` files), and the completeness check of the delivered output (every
word's highest count reaches its expected count; Parquet sink files read once each; an extra
or missing word fails the verdict). The benchmark itself runs once, tiny (2 files of 500
lines, about 7 s), as a user runs it: both outputs verified, every figure there. Never a
timing assertion."""

from __future__ import annotations

import asyncio
import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laminar_cluster.bench.books import (
    LINE_WORDS_MAX,
    LINE_WORDS_MIN,
    Books,
    generate,
    vocabulary,
    write_directory,
    write_store,
)
from laminar_cluster.bench.files_job import (
    WordCounts,
    highest_counts,
    is_complete,
    print_files,
    verify_counts,
    verify_peer_counts,
)
from laminar_cluster.connectors.file_encoding import encode_parquet
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.harness.reference_jobs import WORD, output_prefix, wordcount
from laminar_cluster.jobs import compile_job
from laminar_cluster.store import CREATE, open_store

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")
SMALL = Books(seed=5, files=3, lines=400, vocabulary=800)


def test_expected_counts_are_the_words_a_reader_finds_in_the_text() -> None:
    corpus = generate(SMALL)
    found: collections.Counter[str] = collections.Counter()
    for body in corpus.files.values():
        for line in body.decode().splitlines():
            words = WORD.findall(line.lower())
            assert LINE_WORDS_MIN <= len(words) <= LINE_WORDS_MAX
            assert line != line.lower()  # a capitalised first word
            found.update(words)
    assert found == corpus.expected
    assert corpus.lines == 1_200 and corpus.words == found.total()
    assert sorted(corpus.files) == ["book-00000.txt", "book-00001.txt", "book-00002.txt"]
    assert generate(SMALL) == corpus  # seeded: the same files again
    assert generate(Books(seed=6, files=3, lines=400, vocabulary=800)) != corpus


def test_the_vocabulary_is_distinct_and_the_choice_skewed() -> None:
    words = vocabulary(10_000, seed=17)
    assert len(set(words)) == 10_000
    assert all(WORD.fullmatch(word) for word in words)
    assert any(word.endswith("'s") for word in words)
    counts = generate(SMALL).expected.most_common()
    assert counts[0][1] > 20 * counts[len(counts) // 2][1]  # Zipf: the top word dominates
    with pytest.raises(InvalidArgument, match="each must be >= 1"):
        Books(files=0)


def test_files_land_one_put_each_under_books_and_as_text_files(tmp_path: Path) -> None:
    corpus = generate(SMALL)
    asyncio.run(write_store(f"file://{tmp_path}/store?fsync=false", corpus))

    async def stored() -> dict[str, bytes]:
        store = open_store(f"file://{tmp_path}/store")
        try:
            keys = [meta.key for meta in await store.list("books/", limit=100)]
            return {key: (await store.get(key)).body for key in keys}
        finally:
            await store.close()

    assert asyncio.run(stored()) == {f"books/{n}": b for n, b in corpus.files.items()}
    paths = write_directory(tmp_path / "text", corpus)
    assert {path.name: path.read_bytes() for path in paths} == corpus.files


def test_the_reference_job_counts_the_words_of_a_line() -> None:
    program = compile_job(wordcount)
    run, out = program.new_vnode(), []
    events = program.flat_map({"text": "Don't stop; the END, the end!"})
    run.process(events, partition=0, first_offset=0, out=out)
    run.flush(out)
    got = {emit.record["word"]: emit.record["count"] for emit in out}
    assert got == {"don't": 1, "stop": 1, "the": 2, "end": 2}


def test_output_is_complete_when_every_word_reaches_its_count_and_verified_only_if_exact() -> None:
    expected = {"a": 3, "b": 1}
    highest: dict[str, int] = {}
    highest_counts([{"word": "a", "count": 2}, {"word": "b", "count": 1}], highest)
    assert not is_complete(highest, expected)
    highest_counts([{"word": "a", "count": 3}, {"word": "a", "count": 1}], highest)
    assert highest == {"a": 3, "b": 1} and is_complete(highest, expected)
    assert verify_counts(expected, highest)[0]
    highest_counts([{"word": "c", "count": 1}], highest)
    assert is_complete(highest, expected)
    assert verify_counts(expected, highest) == (
        False,
        "0 of 2 words differ or are missing; 1 extra",
    )
    assert not verify_counts(expected, {"a": 4, "b": 1})[0]


def test_word_counts_read_each_parquet_sink_file_once(tmp_path: Path) -> None:
    prefix = output_prefix("wordcount")

    async def run() -> None:
        store = open_store(f"file://{tmp_path}?fsync=false")
        counts = WordCounts.of(store, {"x": 2, "y": 1})

        async def land(checkpoint: int, records: list[dict[str, object]]) -> None:
            key = f"{prefix}checkpoint={checkpoint:020d}/node={1:020d}.parquet"
            await store.put(key, encode_parquet(records, key=key), CREATE)

        try:
            await land(1, [{"word": "x", "count": 1}, {"word": "y", "count": 1}])
            assert not await counts.poll()
            await land(2, [{"word": "x", "count": 2}])
            assert await counts.files.read_new() == [{"word": "x", "count": 2}]
            assert await counts.files.read_new() == []  # nothing new: nothing read again
            counts.highest.clear()
            assert not await counts.poll()  # what was read is not returned again
            await land(3, [{"word": "x", "count": 2}, {"word": "y", "count": 1}])
            assert await counts.poll() and counts.highest == {"x": 2, "y": 1}
            assert len(counts.files.files) == 3
        finally:
            await store.close()

    asyncio.run(run())


def test_the_bytewax_output_must_hold_each_word_once_with_its_count() -> None:
    expected = {"a": 2, "b": 1}
    assert verify_peer_counts(expected, [{"word": "a", "count": 2}, {"word": "b", "count": 1}])[0]
    assert not verify_peer_counts(expected, [{"word": "a", "count": 2}])[0]
    twice = [{"word": "a", "count": 2}, {"word": "a", "count": 2}, {"word": "b", "count": 1}]
    assert not verify_peer_counts(expected, twice)[0]


@pytest.mark.processes
def test_bench_files_tiny_run_verifies_the_nodes_and_bytewax(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("bytewax")
    args = ["bench", "files", "--files", "2", "--lines", "500", "--no-fsync", "--json"]
    result = subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures: dict[str, Any] = json.loads(result.stdout)
    assert figures["job_path"] == "laminar_cluster.harness.reference_jobs:wordcount"
    assert figures["input"]["lines"] == 1_000
    [run] = figures["runs"]
    assert run["complete"] is True and run["verified"] is True, run["verification"]
    assert run["words"] == figures["input"]["words"] and run["words_per_s"] > 0
    assert run["checkpoints"]["committed"] >= 1
    assert run["bytewax"]["verified"] is True and run["bytewax"]["workers"] == 1
    assert isinstance(run["ratio"], float)
    print_files(figures, as_json=False)
    assert "words/s" in capsys.readouterr().out
