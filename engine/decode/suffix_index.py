"""Free drafts from the workspace: one index over many token sequences ("documents": open files, a session's
earlier completions) that answers "what followed the longest earlier match of the context's last tokens?"
without rescanning the documents (SuffixDecoding-style).

Each document keeps a suffix array of its *reversed* tokens. Reading the context backwards from its last token
then narrows one suffix-array range per extra token matched, so the longest match of the context's tail is a few
binary searches per document, and the range holds every occurrence of it; the most recent occurrence is the
smallest reversed start. Adding, replacing or removing a document only rebuilds that document's array (numpy
prefix doubling, O(n log² n)); the rest of the index is untouched. Total tokens are capped: the documents updated
longest ago are evicted first.

Tokens are non-negative ids. A document may hold SEPARATOR (-1) between pieces that must not be joined (one
completion and the next): no context token equals it, so no match runs across it, and a continuation stops there.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

SEPARATOR = -1
_ENDED = -2  # what a suffix that has run out of tokens compares as: below every token and the separator


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """Start positions of the suffixes of tokens in sorted order (a suffix that ends sorts before its extensions)."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = np.unique(tokens, return_inverse=True)[1].astype(np.int64).reshape(-1)
    sa = np.argsort(rank, kind="stable")
    width = 1
    while width < n:
        second = np.full(n, -1, dtype=np.int64)  # -1: past the end, below every rank
        second[:n - width] = rank[width:]
        sa = np.lexsort((second, rank))
        first_key, second_key = rank[sa], second[sa]
        new_group = np.ones(n, dtype=bool)
        new_group[1:] = (first_key[1:] != first_key[:-1]) | (second_key[1:] != second_key[:-1])
        sorted_rank = np.cumsum(new_group) - 1
        rank = np.empty(n, dtype=np.int64)
        rank[sa] = sorted_rank
        if sorted_rank[-1] == n - 1:  # every suffix has its own rank: sorted
            break
        width *= 2
    return sa


@dataclass
class Hit:
    tokens: list[int]  # the continuation: up to k tokens that followed the match
    length: int  # how many context tokens matched (capped at the query's max_ngram)
    key: str  # the document it came from
    source: str  # that document's source label ("workspace", "history", ...)


class _Document:
    def __init__(self, tokens: np.ndarray, source: str, generation: int):
        self.tokens = tokens
        self.source = source
        self.generation = generation  # larger = updated more recently
        self.reversed = tokens[::-1].copy()
        self.sa = suffix_array(self.reversed)
        self.first = self.reversed[self.sa]  # each sorted suffix's first token: the first level of every query

    def longest_match(self, tail: Sequence[int], min_ngram: int) -> tuple[int, int] | None:
        """(match length, end of the most recent occurrence in tokens) for the longest tail match that has at
        least one token after it, or None. tail is the context backwards: tail[0] is its last token."""
        n = len(self.reversed)
        lo = int(np.searchsorted(self.first, tail[0], "left")) if n else 0
        hi = int(np.searchsorted(self.first, tail[0], "right")) if n else 0
        ranges = []  # ranges[d] = the suffix-array range matching tail[:d + 1]
        depth = 0
        while lo < hi:
            ranges.append((lo, hi))
            depth += 1
            if depth == len(tail):
                break
            starts = self.sa[lo:hi] + depth
            chars = np.where(starts < n, self.reversed[np.minimum(starts, n - 1)], _ENDED)
            lo, hi = lo + int(np.searchsorted(chars, tail[depth], "left")), lo + int(
                np.searchsorted(chars, tail[depth], "right"))
        # The deepest range may only hold occurrences with nothing after them (the document's end, or a
        # separator): then a shorter match, whose range holds more occurrences, may still have a continuation.
        for length in range(len(ranges), min_ngram - 1, -1):
            lo, hi = ranges[length - 1]
            starts = self.sa[lo:hi]  # reversed start p <-> the match ends right before tokens[n - p]
            after = np.where(starts > 0, self.tokens[(n - starts) % n], SEPARATOR)
            usable = starts[after != SEPARATOR]
            if len(usable):
                return length, n - int(usable.min())
        return None


class SuffixIndex:
    """Documents by key; thread-safe (the LSP thread updates while the engine worker queries)."""

    def __init__(self, max_tokens: int = 1 << 18):
        self.max_tokens = max_tokens
        self._docs: dict[str, _Document] = {}
        self._generation = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, key: str) -> bool:
        return key in self._docs

    def count(self, source: str) -> int:
        return sum(doc.source == source for doc in list(self._docs.values()))

    @property
    def total_tokens(self) -> int:
        return sum(len(doc.tokens) for doc in list(self._docs.values()))

    def add(self, key: str, tokens: Sequence[int], source: str = "workspace") -> None:
        """Add or replace a document. One longer than the whole cap keeps its last max_tokens tokens."""
        array = np.asarray(tokens, dtype=np.int64)[-self.max_tokens:]
        doc = _Document(array, source, 0)  # built outside the lock: queries go on meanwhile
        with self._lock:
            doc.generation = next(self._generation)
            self._docs[key] = doc
            self._evict(keep=key)

    def remove(self, key: str) -> None:
        with self._lock:
            self._docs.pop(key, None)

    def tokens(self, key: str) -> list[int] | None:
        doc = self._docs.get(key)
        return doc.tokens.tolist() if doc is not None else None

    def query(self, context: Sequence[int], max_ngram: int, k: int, min_ngram: int = 2) -> Hit | None:
        """The continuation (up to k tokens) after the longest match (min_ngram..max_ngram tokens) of the
        context's tail in any document; among equally long matches the most recent: the most recently updated
        document, and in it the last occurrence."""
        if k <= 0 or len(context) < min_ngram:
            return None
        tail = [int(t) for t in context[-max_ngram:][::-1]]
        with self._lock:
            docs = list(self._docs.items())
        best = None  # (length, generation, end, key, doc)
        for key, doc in docs:
            found = doc.longest_match(tail, min_ngram)
            if found is not None:
                candidate = (found[0], doc.generation, found[1], key, doc)
                if best is None or candidate[:3] > best[:3]:
                    best = candidate
        if best is None:
            return None
        length, _, end, key, doc = best
        follow = doc.tokens[end:end + k].tolist()
        if SEPARATOR in follow:
            follow = follow[:follow.index(SEPARATOR)]
        return Hit(tokens=follow, length=length, key=key, source=doc.source)

    def _evict(self, keep: str) -> None:
        total = sum(len(doc.tokens) for doc in self._docs.values())
        for key in sorted(self._docs, key=lambda k: self._docs[k].generation):
            if total <= self.max_tokens:
                break
            if key != keep:
                total -= len(self._docs.pop(key).tokens)
