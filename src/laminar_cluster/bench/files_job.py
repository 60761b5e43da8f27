"""`laminar-cluster bench files`: word count over text files landing in the store, on node
processes against Bytewax 0.21 on the same files, in the same run.

Input: before any timing, `bench.books` generates `files` seeded text files of `lines` lines
(a Zipf-like choice over 10,000 words) and counts each word as it draws it; the files are put
into a file:// store under `books/` (one PUT each), and each node count runs on a copy of that
store. Nodes: `nodes` processes of `laminar-cluster node --job
laminar_cluster.harness.reference_jobs:wordcount` with the bench timings (checkpoint every
1 s, `pipeline_run.TIMINGS`): the leader finds the files (a LIST every second), each file's
vnode owner reads it and routes its words through the record log to their owners, which count
them and deliver running counts as Parquet into the store at each checkpoint. The window runs
from the first `activated` event of any node to the moment a poll of the sink (every
`POLL_S`, reading only the Parquet objects it had not read) finds every word's highest
delivered count equal to its expected count: delivered, exactly-once throughput, checkpoint
pauses and the delivery of the last checkpoint included (up to one poll late). Then the
delivered counts must equal the expected ones exactly, no word extra (`verified`). A run
whose output is not complete in `COMPLETE_TIMEOUT_S` reports `complete: false`, no rate and
what differs, and the next node count still runs; a node that exits fails the bench.

Peer: Bytewax's `wordcount` flow (`bench.bytewax_flows`) over the same files written as
`.txt` into a directory, with as many workers as nodes, recovery snapshots every second,
verified against the same counts (`bytewax_peer.measure_peer`). `ratio` = the nodes' words/s
over Bytewax's `processing_words_per_s` (its wall time less its start, as `bench pipeline
--job`), `ratio_wall` over its wall figure. Nothing here asserts a timing.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from laminar_cluster.bench import bytewax_peer
from laminar_cluster.bench.books import Books, Corpus, generate, write_directory, write_store
from laminar_cluster.bench.job_output import Records, SinkFiles, Verdict, parquet_rows
from laminar_cluster.bench.pipeline_run import TIMINGS, file_url
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import DeadlineExceeded, InvalidArgument
from laminar_cluster.harness.fleet import NodeFleet
from laminar_cluster.harness.pipeline_logs import checkpoint_figures, events_of
from laminar_cluster.harness.reference_jobs import output_prefix
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.views.output import console, print_json

JOB_PATH: Final = "laminar_cluster.harness.reference_jobs:wordcount"
POLL_S: Final = 0.25
COMPLETE_TIMEOUT_S: Final = 600.0


def highest_counts(records: Records, into: dict[str, int]) -> None:
    """Raise each record's word in `into` to its count if that is higher (running counts:
    a word is re-emitted at each checkpoint that changed it, so its highest is its total)."""
    for record in records:
        word, count = str(record["word"]), int(record["count"])
        if count > into.get(word, 0):
            into[word] = count


def is_complete(highest: Mapping[str, int], expected: Mapping[str, int]) -> bool:
    """Every expected word's highest delivered count equals its expected count."""
    return all(highest.get(word) == count for word, count in expected.items())


def verify_counts(expected: Mapping[str, int], highest: Mapping[str, int]) -> Verdict:
    """The delivered counts equal `expected` exactly: no word missing, wrong or extra."""
    if dict(highest) == dict(expected):
        return True, f"{len(expected):,} words' counts as computed"
    wrong = sum(1 for word, count in expected.items() if highest.get(word) != count)
    extra = len(set(highest) - set(expected))
    return False, f"{wrong:,} of {len(expected):,} words differ or are missing; {extra} extra"


@dataclass
class WordCounts:
    """The highest delivered count of each word, read incrementally from the sink."""

    files: SinkFiles
    expected: Mapping[str, int]
    highest: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, store: ObjectStore, expected: Mapping[str, int]) -> WordCounts:
        """Over the wordcount reference job's Parquet sink in `store`."""
        return cls(SinkFiles(store, output_prefix("wordcount"), decode=parquet_rows), expected)

    async def poll(self) -> bool:
        """Read the sink files not read before; whether the output is complete."""
        highest_counts(await self.files.read_new(), self.highest)
        return is_complete(self.highest, self.expected)


def run_bench_files(
    *,
    files: int = 32,
    lines: int = 8_000,
    node_counts: tuple[int, ...] = (1,),
    fsync: bool = True,
    bytewax: bool = True,
) -> dict[str, Any]:
    """Every node count, each with its Bytewax peer; the figures, JSON-ready."""
    if not node_counts or min(node_counts) < 1:
        raise InvalidArgument(f"node counts must be >= 1, not {node_counts}")
    books = Books(files=files, lines=lines)
    corpus = generate(books)
    root = Path(tempfile.mkdtemp(prefix="laminar-bench-files-"))
    try:
        template = root / "template"
        put_s = asyncio.run(write_store(file_url(template, fsync), corpus))
        write_directory(root / "text", corpus)
        runs = []
        for nodes in node_counts:
            figures = asyncio.run(_one(nodes, corpus, template, fsync=fsync))
            _peer(figures, corpus, nodes, root, bytewax=bytewax)
            runs.append(figures)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "job": "wordcount",
        "job_path": JOB_PATH,
        "store": "file:// (a copy of the pre-written files per run"
        + ("" if fsync else ", no fsync")
        + ")",
        "nodes_run_as": "real processes (python -m laminar_cluster.cli node --job), this host",
        "input": {
            "files": files,
            "lines": corpus.lines,
            "words": corpus.words,
            "distinct_words": len(corpus.expected),
            "bytes": corpus.size_bytes,
            "seed": books.seed,
        },
        "put_s": round(put_s, 3),
        "checkpoint_interval_s": TIMINGS.checkpoint_interval_s,
        "runs": runs,
    }


async def _one(nodes: int, corpus: Corpus, template: Path, *, fsync: bool) -> dict[str, Any]:
    clock = RealClock()
    scratch = template.parent / f"nodes-{nodes}"
    shutil.copytree(template, scratch / "store")
    url = file_url(scratch / "store", fsync)
    store = open_store(url)
    try:
        with NodeFleet(url, scratch, TIMINGS) as fleet:
            started = clock.monotonic()
            for node in range(1, nodes + 1):
                fleet.start(node, ["--job", JOB_PATH])
            counts = WordCounts.of(store, corpus.expected)
            complete = await _until_complete(fleet, counts, nodes, clock)
            end = clock.monotonic()
            fleet.refresh()
            activated = [float(e["t_mono"]) for _, e in events_of(fleet.runs, "activated")]
            begin = min(activated, default=started)
            window_s = max(end - begin, 1e-9)
            verified, verification = verify_counts(corpus.expected, counts.highest)
            if not complete:
                verification = f"not complete in {COMPLETE_TIMEOUT_S:.0f} s: {verification}"
            return {
                "nodes": nodes,
                "words": corpus.words,
                "lines": corpus.lines,
                "complete": complete,
                "start_to_processing_s": round(begin - started, 3),
                "process_s": round(window_s, 3),
                "words_per_s": round(corpus.words / window_s) if complete else None,
                "lines_per_s": round(corpus.lines / window_s) if complete else None,
                "checkpoints": checkpoint_figures(fleet.runs, since=begin),
                "sink_files": len(counts.files.files),
                "verified": verified,
                "verification": verification,
            }
    finally:
        await store.close()
        shutil.rmtree(scratch, ignore_errors=True)


async def _until_complete(fleet: NodeFleet, counts: WordCounts, nodes: int, clock: Clock) -> bool:
    """Poll the sink until the output is complete (True) or COMPLETE_TIMEOUT_S passes (False:
    the run reports what it has); DeadlineExceeded if a node exits."""
    deadline = clock.monotonic() + COMPLETE_TIMEOUT_S
    what = f"all {sum(counts.expected.values()):,} words counted by {nodes} nodes"
    try:
        await fleet.until(
            what, counts.poll, clock=clock, timeout_s=COMPLETE_TIMEOUT_S, poll_s=POLL_S
        )
    except DeadlineExceeded:
        if clock.monotonic() < deadline:
            raise  # a node exited
        return False
    return True


def verify_peer_counts(expected: Mapping[str, int], records: Records) -> tuple[bool, int]:
    """Bytewax's output: one record per word, the counts equal to `expected` (no late events)."""
    got = {str(r["word"]): int(r["count"]) for r in records}
    return len(got) == len(records) and got == dict(expected), 0


def _peer(
    figures: dict[str, Any], corpus: Corpus, nodes: int, root: Path, *, bytewax: bool
) -> None:
    """Measure Bytewax with `nodes` workers over the text files; the ratios."""
    figures["bytewax"] = figures["ratio"] = figures["ratio_wall"] = None
    if not bytewax:
        return
    peer = bytewax_peer.measure_peer(
        "wordcount",
        input_dir=root / "text",
        events=corpus.words,
        verify=lambda records: verify_peer_counts(corpus.expected, records),
        workers=nodes,
        tmp=root,
    )
    figures["bytewax"] = {
        **peer.as_json(),
        "words_per_s": peer.events_per_s,
        "processing_words_per_s": peer.processing_per_s,
    }
    if figures["words_per_s"] is not None:
        figures["ratio"], figures["ratio_wall"] = peer.ratios(figures["words_per_s"])


def print_files(figures: dict[str, Any], *, as_json: bool) -> None:
    """The figures as JSON, or a line per node count: the nodes, Bytewax, the ratio."""
    if as_json:
        print_json(figures)
        return
    text = figures["input"]
    console.print(
        f"job {figures['job']} ({figures['job_path']}): {text['files']} files, "
        f"{text['lines']:,} lines, {text['words']:,} words ({text['distinct_words']:,} "
        f"distinct, {text['bytes']:,} bytes), put in {figures['put_s']} s on "
        f"{figures['store']}; checkpoint every {figures['checkpoint_interval_s']} s",
        soft_wrap=True,
    )
    for run in figures["runs"]:
        peer = run["bytewax"]
        versus = (
            "Bytewax not measured"
            if peer is None
            else f"Bytewax {peer['workers']} worker(s): {peer['processing_words_per_s']:,} "
            f"words/s ({peer['words_per_s']:,} with its start), verified {peer['verified']}; "
            f"ratio {run['ratio']}x ({run['ratio_wall']}x)"
        )
        rate = (
            "not complete"
            if run["words_per_s"] is None
            else f"{run['words_per_s']:>9,} words/s, {run['lines_per_s']:,} lines/s delivered"
        )
        console.print(
            f"  {run['nodes']} node(s): {rate} ({run['process_s']:.2f} s, "
            f"{run['checkpoints']['committed']} checkpoints), verified {run['verified']} "
            f"({run['verification']}); {versus}",
            soft_wrap=True,
        )
