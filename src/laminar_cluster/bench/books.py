"""The input of `bench files`: deterministic text files, written into a store and a directory,
with each word's count computed straight from the generator.

`generate(Books(...))` draws, from `seed` alone, a vocabulary of `vocabulary` distinct
lowercase pseudo-words (syllables; every `APOSTROPHE_EVERY`-th ends in `'s`), ranked in a
seeded order, and `files` files of `lines` lines each. Each line holds `LINE_WORDS_MIN` to
`LINE_WORDS_MAX` words, each chosen with probability proportional to 1 / rank (Zipf, s = 1:
the commonest word is about 10% of the text); the line's first word is capitalised and the
line ends in punctuation, so a reader must lowercase and drop punctuation to find the words.
The expected counts are the chosen words themselves, counted as they are drawn (never by
parsing the text). Each file is `book-00007.txt`: `BOOKS_PREFIX + name` in the store (one PUT
per file), `name` in a directory for Bytewax.
"""

from __future__ import annotations

import collections
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.harness.reference_jobs import BOOKS_PREFIX
from laminar_cluster.store import CREATE, open_store

LINE_WORDS_MIN: Final = 5
LINE_WORDS_MAX: Final = 15
APOSTROPHE_EVERY: Final = 37
ENDINGS: Final = (".", ".", ",", "!", "?", ";")
_ONSETS: Final = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st")
_VOWELS: Final = ("a", "e", "i", "o", "u", "ai", "ou")


@dataclass(frozen=True, slots=True)
class Books:
    """What to generate: `files` files of `lines` lines over `vocabulary` words."""

    seed: int = 17
    files: int = 32
    lines: int = 8_000
    vocabulary: int = 10_000

    def __post_init__(self) -> None:
        if self.files < 1 or self.lines < 1 or self.vocabulary < 1:
            raise InvalidArgument(
                f"books: {self.files} files of {self.lines} lines over {self.vocabulary} "
                "words; each must be >= 1"
            )


@dataclass(frozen=True, slots=True)
class Corpus:
    """The generated files (name -> UTF-8 text) and each word's count over all of them."""

    files: dict[str, bytes]
    expected: collections.Counter[str]
    lines: int

    @property
    def words(self) -> int:
        """Words in all the files."""
        return self.expected.total()

    @property
    def size_bytes(self) -> int:
        """Bytes of text in all the files."""
        return sum(len(body) for body in self.files.values())


def vocabulary(size: int, seed: int) -> list[str]:
    """`size` distinct words, in the seeded order of their rank (most frequent first)."""
    syllables = [onset + vowel for onset in _ONSETS for vowel in _VOWELS]
    words = []
    for index in range(size):
        parts, rest = [], index
        while True:  # index in base len(syllables), at least two syllables: distinct words
            parts.append(syllables[rest % len(syllables)])
            rest //= len(syllables)
            if rest == 0 and len(parts) >= 2:
                break
        word = "".join(parts)
        words.append(word + "'s" if index % APOSTROPHE_EVERY == APOSTROPHE_EVERY - 1 else word)
    random.Random(seed).shuffle(words)
    return words


def generate(books: Books) -> Corpus:
    """The files and expected counts of `books` (module docstring)."""
    ranked = vocabulary(books.vocabulary, books.seed)
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(ranked) + 1)))
    expected: collections.Counter[str] = collections.Counter()
    files: dict[str, bytes] = {}
    for number in range(books.files):
        rng = random.Random(f"{books.seed}/{number}")
        text = []
        for _ in range(books.lines):
            count = rng.randint(LINE_WORDS_MIN, LINE_WORDS_MAX)
            chosen = rng.choices(ranked, cum_weights=cumulative, k=count)
            expected.update(chosen)
            text.append(f"{chosen[0].capitalize()} {' '.join(chosen[1:])}{rng.choice(ENDINGS)}")
        files[f"book-{number:05d}.txt"] = ("\n".join(text) + "\n").encode()
    return Corpus(files=files, expected=expected, lines=books.files * books.lines)


async def write_store(url: str, corpus: Corpus, *, timeout_s: float = 120.0) -> float:
    """Put each file under `BOOKS_PREFIX` of the store at `url`, one PUT each; seconds."""
    clock = RealClock()
    started = clock.monotonic()
    store = open_store(url)
    try:
        async with clock.timeout_at(started + timeout_s):
            for name, body in corpus.files.items():
                await store.put(BOOKS_PREFIX + name, body, CREATE)
    finally:
        await store.close()
    return clock.monotonic() - started


def write_directory(directory: Path, corpus: Corpus) -> list[Path]:
    """Write each file as `directory/name` (the directory created); the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, body in corpus.files.items():
        path = directory / name
        path.write_bytes(body)
        paths.append(path)
    return paths
