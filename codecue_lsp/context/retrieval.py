"""Lexical retrieval: windows of the indexed files' lines scored against the text before the cursor.

As Copilot and Cody do it: a chunk's score is the Jaccard similarity of its identifier set and the query's. An
inverted index (identifier -> chunk ids) keeps a query to the chunks that share an identifier with it, rarest
identifiers first, so a query answers in milliseconds over 100k chunks in pure Python.
"""
from __future__ import annotations

import heapq
import sys
from array import array
from collections import Counter
from dataclasses import dataclass

from ..prompt.context import _COMMON_WORDS
from ..prompt.text import IDENTIFIER
from .types import Chunk

CHUNK_LINES = 20
CHUNK_STRIDE = 10
# Posting entries a query reads at most: the rarest identifiers' lists are read until this many (always the
# rarest one); chunks sharing only very common identifiers with the query are not candidates.
MAX_POSTINGS = 40_000
# Candidates are the chunks sharing the most identifiers among the lists read (about this many); the RESCORE
# best of them by the Jaccard score over those lists get their exact score. These bounds only bite in large
# indexes (measured: the top 5 equal an exhaustive scan's for 94% of queries over 95k chunks).
MAX_CANDIDATES = 1_000
RESCORE = 100
# Keywords and words too common in code to tell two windows apart.
STOP_WORDS = _COMMON_WORDS | frozenset("""del global nonlocal assert break continue case match switch default
return null undefined nil true false println print len str list dict set tuple range isinstance super args kwargs
else goto do done then fi end begin val extends implements throws throw catch final override abstract virtual
const_cast static_cast size_t int32_t int64_t uint8_t usize isize u8 u32 u64 i32 i64 f32 f64 Self Ok Err Some
Vec Option Result error err ctx make chan map go defer select range""".split())


def identifiers(text: str) -> frozenset[str]:
    """The identifier set that chunks and queries are compared by (interned: equal names share one string)."""
    return frozenset(sys.intern(word) for word in IDENTIFIER.findall(text)
                     if len(word) > 1 and word not in STOP_WORDS)


@dataclass(frozen=True, slots=True)
class TextChunk(Chunk):
    """A window with its lines, as chunk_text cuts it: the text gives its identifiers (and shows it, in benchmarks).
    The workspace index keeps only the plain Chunk (`plain`) and reads the lines back from the file when shown."""
    text: str

    def plain(self) -> Chunk:
        return Chunk(self.path, self.start_line, self.end_line)


def chunk_text(path: str, text: str) -> list[TextChunk]:
    """Overlapping windows of CHUNK_LINES lines every CHUNK_STRIDE lines; blank-only windows are skipped."""
    lines = text.split("\n")
    chunks = []
    for start in range(0, max(len(lines), 1), CHUNK_STRIDE):
        end = min(start + CHUNK_LINES, len(lines))
        body = "\n".join(lines[start:end])
        if body.strip():
            chunks.append(TextChunk(path, start, end, body))
        if end >= len(lines):
            break
    return chunks


def chunk_words(path: str, text: str) -> tuple[tuple[Chunk, ...], tuple[frozenset[str], ...]]:
    """A file's chunks without their text (the file keeps it) and each one's identifiers, for RetrievalIndex.add."""
    windows = chunk_text(path, text)
    return tuple(w.plain() for w in windows), tuple(identifiers(w.text) for w in windows)


class RetrievalIndex:
    """Chunks of every indexed file, queried by similarity to the text before the cursor. Not thread-safe by
    itself: the WorkspaceIndex guards it with its lock; `query` only reads."""

    def __init__(self) -> None:
        self.by_path: dict[str, tuple[Chunk, ...]] = {}
        self._ids_by_path: dict[str, tuple[int, ...]] = {}
        # chunk id -> (chunk, its identifiers as a tuple of interned strings: a third of a frozenset's bytes)
        self._entries: dict[int, tuple[Chunk, tuple[str, ...]]] = {}
        self._postings: dict[str, array] = {}   # identifier -> ids of chunks holding it (some may be removed)
        self._stale: dict[str, int] = {}        # identifier -> how many of its postings are removed chunks
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, path: str, chunks, words=None) -> None:
        """Replace `path`'s chunks. `words`: each chunk's identifiers (`identifiers` of its text, computed by the
        caller outside its lock); None = taken from each chunk's text (TextChunks)."""
        chunks = tuple(chunks)
        words = tuple(identifiers(chunk.text) for chunk in chunks) if words is None else tuple(words)
        if len(words) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks of {path} but {len(words)} identifier sets")
        self.remove(path)
        if not chunks:
            return
        ids = []
        for chunk, names in zip(chunks, words):
            chunk_id = self._next_id
            self._next_id += 1
            names = tuple(names)
            self._entries[chunk_id] = (chunk, names)
            for word in names:
                postings = self._postings.get(word)
                if postings is None:
                    postings = self._postings[word] = array("i")
                postings.append(chunk_id)
            ids.append(chunk_id)
        self.by_path[path] = chunks
        self._ids_by_path[path] = tuple(ids)

    def remove(self, path: str) -> None:
        self.by_path.pop(path, None)
        for chunk_id in self._ids_by_path.pop(path, ()):
            _, words = self._entries.pop(chunk_id)
            for word in words:
                self._forget(word)

    def _forget(self, word: str) -> None:
        """Count one removed posting of `word`; rewrite its list once half of it is removed (amortized O(1))."""
        stale = self._stale.get(word, 0) + 1
        postings = self._postings[word]
        if stale * 2 < len(postings):
            self._stale[word] = stale
            return
        self._stale.pop(word, None)
        live = array("i", [i for i in postings if i in self._entries])
        if live:
            self._postings[word] = live
        else:
            del self._postings[word]

    def query(self, text: str, k: int, exclude_path: str | None = None,
              boost_paths=None) -> list[tuple[float, Chunk]]:
        """The k chunks most similar to `text`, best first, as (score, chunk); `boost_paths` maps a path to a
        factor (recently viewed or edited files first). Chunks of `exclude_path` (the current file) are skipped."""
        wanted = identifiers(text)
        if not wanted or k <= 0:
            return []
        lists = sorted((len(p), p) for p in map(self._postings.get, wanted) if p is not None)
        shared_counts: Counter = Counter()  # chunk id -> identifiers shared among the lists read
        read = 0
        for size, postings in lists:
            if shared_counts and read + size > MAX_POSTINGS:
                break
            shared_counts.update(postings)
            read += size
        floor = _floor(shared_counts, MAX_CANDIDATES)
        entries, boosts, total = self._entries, boost_paths or {}, len(wanted)
        rough = []
        for chunk_id, shared in [item for item in shared_counts.items() if item[1] >= floor]:
            entry = entries.get(chunk_id)
            if entry is None or entry[0].path == exclude_path:
                continue
            score = shared / (total + len(entry[1]) - shared)
            rough.append((score * boosts.get(entry[0].path, 1.0) if boosts else score, chunk_id))
        scored = []
        for _, chunk_id in heapq.nlargest(max(RESCORE, k), rough):  # exact Jaccard for the likely best
            chunk, words = entries[chunk_id]
            shared = len(wanted.intersection(words))
            score = shared / (total + len(words) - shared)
            scored.append((score * boosts.get(chunk.path, 1.0) if boosts else score, -chunk_id, chunk))
        best = heapq.nlargest(k, scored, key=lambda item: item[:2])
        return [(score, chunk) for score, _, chunk in best if score > 0]


def _floor(shared_counts: Counter, wanted: int) -> int:
    """The least shared count that keeps about `wanted` candidates (all of them when there are fewer)."""
    histogram = Counter(shared_counts.values())
    kept = 0
    for count in sorted(histogram, reverse=True):
        kept += histogram[count]
        if kept >= wanted:
            return count
    return 1
