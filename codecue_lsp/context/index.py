"""The workspace index: every indexed file's definitions and retrieval chunks, built by a background thread while
completion requests read it. One lock, held only for short steps (one file stored, one lookup): a read never
waits for a whole build. Files' text stays on disk (`file_text` and `chunk_text` read it when needed)."""
from __future__ import annotations

import datetime
import os
import threading
from collections import OrderedDict
from typing import Callable, Sequence

from . import cache, files
from .definitions import extract
from .files import Candidate, IgnoreRules
from .folders import WorkspaceFolders
from .retrieval import RetrievalIndex, chunk_words
from .types import Chunk, Definition, FileEntry

PROGRESS_EVERY = 50
_OBJECT_BYTES = 120  # a rough per-record overhead for the memory estimate
_WORD_BYTES = 12  # a chunk's identifier: its slot in the chunk's tuple and in the identifier's posting list
_MAX_VERDICTS = 2000
_RECENT_FILES = 8  # files whose lines chunk_text keeps (a prompt's similar chunks come from a few files)


def _entry_bytes(entry: FileEntry, words) -> int:
    """An estimate of what an entry keeps in memory: its strings, its chunks' identifiers, per-object overheads."""
    total = len(entry.path) + _OBJECT_BYTES
    for d in entry.definitions:
        total += len(d.name) + len(d.qualified) + len(d.signature) + len(d.doc) + 2 * _OBJECT_BYTES
    for names in words:
        total += 2 * _OBJECT_BYTES + _WORD_BYTES * len(names)  # the chunk, its retrieval entry
    return total


class WorkspaceIndex:
    def __init__(self, roots: Sequence[str], *, languages: Sequence[str] = (), exclude_globs: Sequence[str] = (),
                 max_files: int = 5000, cache_dir: str | None = None) -> None:
        self.folders = WorkspaceFolders(roots)
        self.roots, self.prefixes = self.folders.roots, self.folders.prefixes
        self.languages = tuple(languages)
        self.exclude_globs = tuple(exclude_globs)
        self.max_files = max_files
        self.cache_dir = cache_dir  # None: no cache at all (the index_cache setting off)
        self.retrieval = RetrievalIndex()
        self.parse_count = 0  # files read and parsed (a cache hit is not one)
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._rules = [IgnoreRules(root, self.exclude_globs) for root in self.roots]
        self._entries: dict[str, FileEntry] = {}
        self._left_out: dict[str, tuple[int, int]] = {}  # looked at, kept out for its content (generated...)
        self._by_name: dict[str, list[Definition]] = {}
        self._bytes: dict[str, int] = {}
        self._totals = {"definitions": 0, "chunks": 0, "memory_bytes": 0}
        self._paths: frozenset[str] | None = None
        self._folders: set[tuple[int, str]] = set()  # (root index, folder) walked
        self._touched: dict[str, int] = {}  # rel -> sequence number of its last update/remove
        self._seq = 0
        self._verdicts: dict[str, tuple[int, int, bool]] = {}
        self._recent_lines: OrderedDict[tuple[str, int, int], list[str]] = OrderedDict()  # (rel, mtime, size)
        self._indexing = False
        self._last_update: str | None = None

    # Paths (folders.py)
    def relative(self, abs_path: str) -> str | None:
        return self.folders.relative(abs_path)

    def absolute(self, rel: str) -> str:
        return self.folders.absolute(rel)

    def allowed(self, abs_path: str, text: str | None = None) -> bool:
        """May this file's text reach a prompt? Inside a workspace folder and not excluded by any rule: secret
        names, ignore files, globs, vendored or hidden folders, generated/binary/huge content (`text`: an open
        document's current text, judged instead of the file on disk). Never opens a secret-looking file."""
        located = self.folders.locate(abs_path)
        if located is None or files.is_secret_path(abs_path):
            return False
        root, inner = located
        if self._rules[root].excluded(inner):
            return False
        if text is not None:
            return files.text_excluded(text) is None
        rel = self.prefixes[root] + inner
        try:
            st = os.stat(abs_path)
        except OSError:
            return True  # not on disk (a new, unsaved document): the name rules decided
        with self._lock:
            entry = self._entries.get(rel)
            if entry is not None and (entry.mtime_ns, entry.size) == (st.st_mtime_ns, st.st_size):
                return True
            if self._left_out.get(rel) == (st.st_mtime_ns, st.st_size):
                return False
            verdict = self._verdicts.get(rel)
        if verdict is not None and verdict[:2] == (st.st_mtime_ns, st.st_size):
            return verdict[2]
        if st.st_size > files.MAX_FILE_BYTES:
            ok = False
        else:
            ok = files.read_source(abs_path)[0] is not None
        with self._lock:
            if len(self._verdicts) >= _MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[rel] = (st.st_mtime_ns, st.st_size, ok)
        return ok

    # Reads
    def entry(self, rel: str) -> FileEntry | None:
        with self._lock:
            return self._entries.get(rel)

    def paths(self) -> frozenset[str]:
        with self._lock:
            if self._paths is None:
                self._paths = frozenset(self._entries)
            return self._paths

    def definitions_named(self, name: str) -> list[Definition]:
        with self._lock:
            return list(self._by_name.get(name, ()))

    def definitions_in(self, rel: str) -> tuple[Definition, ...]:
        with self._lock:
            entry = self._entries.get(rel)
        return entry.definitions if entry is not None else ()

    def file_text(self, rel: str) -> str | None:
        """An indexed file's text, read from disk now (the index keeps no whole files)."""
        if self.entry(rel) is None:
            return None
        text, _ = files.read_source(self.absolute(rel))
        return text

    def chunk_text(self, chunk: Chunk) -> str | None:
        """A retrieval chunk's lines, read from its file (the index keeps no chunk text); the last few files read
        are kept split into lines. None when the file is no longer indexed or readable."""
        with self._lock:
            entry = self._entries.get(chunk.path)
            key = (chunk.path, entry.mtime_ns, entry.size) if entry is not None else None
            lines = self._recent_lines.get(key) if key is not None else None
            if lines is not None:
                self._recent_lines.move_to_end(key)
        if key is None:
            return None
        if lines is None:
            text = self.file_text(chunk.path)
            if text is None:
                return None
            lines = text.split("\n")
            with self._lock:
                self._recent_lines[key] = lines
                while len(self._recent_lines) > _RECENT_FILES:
                    self._recent_lines.popitem(last=False)
        return "\n".join(lines[chunk.start_line:chunk.end_line])

    def similar(self, text: str, k: int, exclude_path: str | None = None, boost_paths=None) -> list:
        """The retrieval index's k chunks most like `text` (retrieval.RetrievalIndex.query), read under the lock."""
        with self._lock:
            return self.retrieval.query(text, k, exclude_path=exclude_path, boost_paths=boost_paths)

    def stats(self) -> dict:
        with self._lock:
            return {"files": len(self._entries), **self._totals, "last_update": self._last_update,
                    "indexing": self._indexing, "roots": list(self.roots)}

    # Writes (each under the lock for one file only)
    def _index_file(self, rel: str, language_id: str, abs_path: str,
                    text: str | None = None) -> tuple[FileEntry | None, tuple]:
        """Read (unless `text` is given), parse and chunk one file, outside the lock: (entry, its chunks'
        identifiers); (None, ()) = left out."""
        if text is None:
            text, _ = files.read_source(abs_path)
        elif files.text_excluded(text):
            text = None
        if text is None:
            return None, ()
        defs = extract(rel, language_id, text)
        with self._lock:
            self.parse_count += 1
        chunks, words = chunk_words(rel, text)
        return FileEntry(rel, language_id, 0, 0, defs, chunks, frozenset(d.name for d in defs)), words

    def _drop(self, rel: str) -> None:
        """Forget a file (the lock is held)."""
        self._left_out.pop(rel, None)
        self._verdicts.pop(rel, None)
        old = self._entries.pop(rel, None)
        if old is None:
            return
        for name in {d.name for d in old.definitions}:
            kept = [d for d in self._by_name.get(name, ()) if d.path != rel]
            if kept:
                self._by_name[name] = kept
            else:
                self._by_name.pop(name, None)
        self.retrieval.remove(rel)
        self._totals["definitions"] -= len(old.definitions)
        self._totals["chunks"] -= len(old.chunks)
        self._totals["memory_bytes"] -= self._bytes.pop(rel, 0)
        self._paths = None

    def _store(self, rel: str, entry: FileEntry | None, words, mtime_ns: int, size: int) -> None:
        """Replace a file's record (the lock is held); `entry` None = looked at and left out; `words`: its chunks'
        identifiers (retrieval.identifiers)."""
        self._drop(rel)
        self._last_update = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        if entry is None:
            self._left_out[rel] = (mtime_ns, size)
            return
        entry.mtime_ns, entry.size = mtime_ns, size
        self._entries[rel] = entry
        for d in entry.definitions:
            self._by_name.setdefault(d.name, []).append(d)
        self.retrieval.add(rel, entry.chunks, words)
        self._bytes[rel] = _entry_bytes(entry, words)
        self._totals["definitions"] += len(entry.definitions)
        self._totals["chunks"] += len(entry.chunks)
        self._totals["memory_bytes"] += self._bytes[rel]
        self._paths = None

    def update(self, abs_path: str, text: str | None = None) -> bool:
        """Re-index one file (`text`: the editor's current text, else read from disk); False when the file is
        excluded or left out (it is then dropped from the index)."""
        located = self.folders.locate(abs_path)
        if located is None:
            return False
        root, inner = located
        rel = self.prefixes[root] + inner
        language = files.language_for(inner, self.languages)
        try:
            st = os.stat(abs_path)
        except OSError:
            st = None
        if language is None or self._rules[root].excluded(inner) or (text is None and st is None) \
                or (text is None and st.st_size > files.MAX_FILE_BYTES):
            self.remove(abs_path)
            return False
        entry, words = self._index_file(rel, language, abs_path, text)
        mtime_ns, size = (st.st_mtime_ns, st.st_size) if st is not None else (0, len(text.encode("utf-8", "replace")))
        with self._lock:
            self._seq += 1
            self._touched[rel] = self._seq
            self._store(rel, entry, words, mtime_ns, size)
            self._folders.add((root, inner.rpartition("/")[0]))
        return entry is not None

    def remove(self, abs_path: str) -> None:
        rel = self.relative(abs_path)
        if rel is None:
            return
        with self._lock:
            self._seq += 1
            self._touched[rel] = self._seq
            self._drop(rel)

    # Building
    def build(self, progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
              open_paths: Sequence[str] = ()) -> dict:
        """Walk the folders and index them in the caller's thread: cached or unchanged files are reused, others
        parsed; files gone are dropped. Returns counts: files, parsed, reused, left_out, cancelled."""
        with self._build_lock:
            with self._lock:
                self._indexing = True
            try:
                return self._build(progress, cancel, open_paths)
            finally:
                with self._lock:
                    self._indexing = False

    def _walk(self) -> list[Candidate]:
        rules = [IgnoreRules(root, self.exclude_globs) for root in self.roots]
        folders: set[tuple[int, str]] = set()
        found: list[Candidate] = []
        for i, rule in enumerate(rules):
            walked: set[str] = set()
            found += files.walk(rule, self.languages, self.prefixes[i], folders=walked)
            folders |= {(i, folder) for folder in walked}
        with self._lock:
            self._rules = rules
            self._folders = folders
        return found

    def _build(self, progress, cancel, open_paths) -> dict:
        with self._lock:
            start_seq = self._seq
            previous = dict(self._entries)
            previous_left_out = dict(self._left_out)
        candidates = self._walk()
        cached = cache.load(self.cache_dir, self.roots)
        if len(candidates) > self.max_files:
            open_rels = [rel for rel in map(self.relative, open_paths) if rel is not None]
            candidates = files.rank_by_nearness(candidates, open_rels)
        total = min(len(candidates), max(self.max_files, 0))
        seen: set[str] = set()
        counts = {"files": 0, "parsed": 0, "reused": 0, "left_out": 0, "cancelled": False}
        for done, candidate in enumerate(candidates):
            if counts["files"] >= self.max_files:
                break
            if cancel is not None and cancel.is_set():
                counts["cancelled"] = True
                break
            if progress is not None and done % PROGRESS_EVERY == 0 and done:
                progress(min(done, total), total)
            entry, words, reused = self._reuse(candidate, previous, previous_left_out, cached)
            if not reused:
                entry, words = self._index_file(candidate.rel, candidate.language_id, candidate.abs_path)
                counts["parsed"] += 1
            else:
                counts["reused"] += 1
            seen.add(candidate.rel)
            counts["files" if entry is not None else "left_out"] += 1
            with self._lock:
                # Not updated meanwhile by the editor; words None = the entry this index holds, kept as it is.
                if self._touched.get(candidate.rel, 0) <= start_seq and words is not None:
                    self._store(candidate.rel, entry, words, candidate.mtime_ns, candidate.size)
        if not counts["cancelled"]:
            with self._lock:
                gone = [rel for rel in list(self._entries) + list(self._left_out)
                        if rel not in seen and self._touched.get(rel, 0) <= start_seq]
                for rel in gone:
                    self._drop(rel)
            self.save_cache()
            cache.prune(self.cache_dir)
        if progress is not None:
            progress(total if not counts["cancelled"] else counts["files"], total)
        return counts

    @staticmethod
    def _reuse(candidate: Candidate, previous: dict, previous_left_out: dict, cached: dict):
        """(entry, its chunks' identifiers, True) when the file is unchanged since the index or the cache last saw
        it: identifiers None for the index's own entry (already in the retrieval index: a build runs alone and an
        editor's update of the file meanwhile keeps the build from storing it); a cached entry gets its chunks
        again from the file (the cache keeps none)."""
        key = (candidate.mtime_ns, candidate.size)
        old = previous.get(candidate.rel)
        if old is not None and (old.mtime_ns, old.size) == key:
            return old, None, True
        if previous_left_out.get(candidate.rel) == key:
            return None, (), True
        record = cached.get(candidate.rel)
        if record is None or tuple(record[:2]) != key:
            return None, (), False
        entry = record[2]
        if entry is None:
            return None, (), True
        if not isinstance(entry, FileEntry) or entry.path != candidate.rel:
            return None, (), False
        text, _ = files.read_source(candidate.abs_path)
        if text is None:
            return None, (), False
        entry.chunks, words = chunk_words(candidate.rel, text)
        return entry, words, True

    def save_cache(self) -> bool:
        """Write the index to the cache folder (no-op without one)."""
        if self.cache_dir is None:
            return False
        with self._lock:
            records: dict = {rel: (e.mtime_ns, e.size, e) for rel, e in self._entries.items()}
            records.update({rel: (m, s, None) for rel, (m, s) in self._left_out.items()})
        return cache.save(self.cache_dir, self.roots, records)

    # Catching up without file watching
    def mtimes_changed(self) -> list[str]:
        """Indexed (or left-out) files whose modification time or size changed, or that are gone (os.stat each)."""
        with self._lock:
            known = {rel: (e.mtime_ns, e.size) for rel, e in self._entries.items()}
            known.update(self._left_out)
        changed = []
        for rel, key in known.items():
            try:
                st = os.stat(self.absolute(rel))
                if (st.st_mtime_ns, st.st_size) != key:
                    changed.append(rel)
            except (OSError, ValueError):
                changed.append(rel)
        return sorted(changed)

    def refresh_changed(self) -> list[str]:
        """Re-index changed files, drop deleted ones, and pick up new files in the folders already walked
        (new subfolders included). Returns the paths that changed, appeared or disappeared."""
        touched = []
        for rel in self.mtimes_changed():
            path = self.absolute(rel)
            if os.path.isfile(path):
                self.update(path)
            else:
                self.remove(path)
            touched.append(rel)
        with self._lock:
            folders = sorted(self._folders)
            rules = list(self._rules)
            known = set(self._entries) | set(self._left_out)
            room = self.max_files - len(self._entries)
        for root, folder in folders:
            for candidate in self._new_in(rules[root], root, folder, known, set(folders)):
                if room <= 0:
                    return sorted(touched)
                if self.update(candidate.abs_path):
                    room -= 1
                touched.append(candidate.rel)
                known.add(candidate.rel)
        return sorted(touched)

    def _new_in(self, rules: IgnoreRules, root: int, folder: str, known: set[str],
                folders: set[tuple[int, str]]) -> list[Candidate]:
        """Served files of one folder not in the index yet, and those of its subfolders not walked before."""
        if not os.path.isdir(os.path.join(self.roots[root], folder)):
            with self._lock:
                self._folders.discard((root, folder))
            return []
        walked: set[str] = set()
        found = files.walk(rules, self.languages, self.prefixes[root], start=folder, folders=walked,
                           descend=lambda sub: (root, sub) not in folders)
        with self._lock:
            self._folders |= {(root, sub) for sub in walked}
        return [candidate for candidate in found if candidate.rel not in known]
