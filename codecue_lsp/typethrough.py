"""Type-through cache: while the user types the characters of the suggestion on screen, answer with the rest of
it at once, without a model call.

Entries are keyed by document and a hash of its text before the cursor (plus the rest of the cursor's line, since
a completion is only valid for the same text after the cursor). Each document also remembers its last suggestion, so
a prefix that extends the suggestion's prefix by a start of the suggestion is answered with the remainder.

Each document may also hold the line that follows its suggestion (written in the background, next_line.py), keyed by
the text up to the suggestion's end: answered (line break first) once the suggestion is taken, and after Enter.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True)
class Suggestion:
    prefix_len: int
    prefix_hash: bytes
    line_suffix: str
    text: str


class TypeThroughCache:
    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, bytes, str], str] = OrderedDict()
        self._last: dict[str, Suggestion] = {}
        self._next: dict[str, Suggestion] = {}

    def remember(self, uri: str, prefix: str, line_suffix: str, text: str) -> None:
        """Store the suggestion `text` shown for the cursor after `prefix` (empty text is not stored)."""
        if not text:
            return
        digest = text_hash(prefix)
        self._put((uri, digest, line_suffix), text)
        self._last[uri] = Suggestion(len(prefix), digest, line_suffix, text)

    def remember_held_back(self, uri: str, prefix: str, line_suffix: str, text: str) -> None:
        """A suggestion the confidence gate did not show: once the user types its first characters (the start it was
        unsure of, now written) the rest is answered as for a shown one; the same cursor again gets nothing from it."""
        if text:
            self._last[uri] = Suggestion(len(prefix), text_hash(prefix), line_suffix, text)

    def lookup(self, uri: str, prefix: str, line_suffix: str) -> str | None:
        """The rest of a cached suggestion for this cursor, or None."""
        digest = text_hash(prefix)
        key = (uri, digest, line_suffix)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        rest = _rest(self._last.get(uri), prefix, line_suffix, least_typed=1)
        if rest is not None:
            self._put(key, rest)  # so the same cursor is answered again without re-walking
        return rest

    def remember_next(self, uri: str, end: str, text: str) -> None:
        """`text` (a line break, then the next line) follows the suggestion that ends the line at `end`."""
        self._next[uri] = Suggestion(len(end), text_hash(end), "", text)

    def lookup_next(self, uri: str, prefix: str, line_suffix: str) -> str | None:
        """The rest of the remembered next line for this cursor (all of it right after the suggestion), or None."""
        return _rest(self._next.get(uri), prefix, line_suffix, least_typed=0)

    def forget(self, uri: str) -> None:
        """A closed document: nothing of it is answered again, and its entries leave room for open ones."""
        self._last.pop(uri, None)
        self._next.pop(uri, None)
        for key in [key for key in self._entries if key[0] == uri]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
        self._last.clear()
        self._next.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _put(self, key: tuple[str, bytes, str], text: str) -> None:
        self._entries[key] = text
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def _rest(suggestion: Suggestion | None, prefix: str, line_suffix: str, least_typed: int) -> str | None:
    """What is left of `suggestion` once the user typed on from its prefix to `prefix`: at least `least_typed`
    characters of it typed and some left; None when the typing left it."""
    if suggestion is None or suggestion.line_suffix != line_suffix or len(prefix) < suggestion.prefix_len + least_typed:
        return None
    typed = prefix[suggestion.prefix_len:]
    if len(typed) >= len(suggestion.text) or not suggestion.text.startswith(typed):
        return None
    if text_hash(prefix[:suggestion.prefix_len]) != suggestion.prefix_hash:
        return None
    return suggestion.text[len(typed):]
