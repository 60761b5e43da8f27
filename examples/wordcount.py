"""Word count over text files landing in the bucket.

    LAMINAR_EXAMPLE_OUT=/tmp/words-results \\
        laminar-cluster node --store file:///tmp/words --node-id 1 --job examples.wordcount:job

Every file put under `books/` of the cluster's store (a single PUT each, never changed after)
is read once by the owner of its vnode; each line is split into lowercase words
(`flat_map`), each word goes to the owner of its vnode through the record log, and its running
count is written to `wordcount/` as Parquet at each checkpoint: a word's highest count is its
total so far. New files are looked for every 2 seconds (one LIST; at S3's price about $6 a
month: a job that can wait uses the default, 10 s).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from laminar_cluster import Count, FileSource, Job, ParquetSink

OUT = os.environ.get("LAMINAR_EXAMPLE_OUT", "/tmp/laminar-examples")
WORD = re.compile(r"[a-z']+")


def words(line: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The words of one line of text (`{"text": ...}`), each as an event."""
    return ({"word": word} for word in WORD.findall(line["text"].lower()))


job = (
    Job("wordcount")
    .source(FileSource("books/", format="text", discover_interval_s=2.0))
    .flat_map(words)
    .key_by(lambda event: event["word"], name="word")
    .aggregate(Count(name="count"))
    .sink(ParquetSink("wordcount/", url=OUT))
)
