"""The workspace index on disk, so a restart re-parses only the files that changed: one file per workspace (named
by the sha256 of its sorted roots) holding each file's (mtime_ns, size, FileEntry | None). Entries are saved
without their retrieval chunks (re-read and re-chunked from the unchanged file on load: faster than unpickling
them, and a tenth of the size). It still holds code snippets (signatures): private permissions, and no cache at
all when the caller passes no folder. Any mismatch or damage = start empty."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import pickle
import tempfile
import time
from pathlib import Path

from . import definitions
from .types import Chunk, Definition, FileEntry

logger = logging.getLogger(__name__)

FORMAT = 2
SUFFIX = ".index"
MAX_AGE_DAYS = 30
# Records: (mtime_ns, size, entry); entry None = a file looked at and left out (generated, binary).
Record = tuple[int, int, "FileEntry | None"]


def default_cache_dir() -> Path:
    """$CODECUE_HOME/context: where the server keeps workspace indexes."""
    from engine.paths import codecue_home

    return codecue_home() / "context"


def version() -> str:
    """Changes when a record's meaning changes: the cache format or the definitions."""
    return f"{FORMAT}:{definitions.VERSION}"


def cache_file(cache_dir: str | os.PathLike, roots) -> Path:
    key = hashlib.sha256("\n".join(sorted(str(root) for root in roots)).encode("utf-8", "surrogatepass"))
    return Path(cache_dir) / (key.hexdigest() + SUFFIX)


class _Unpickler(pickle.Unpickler):
    """Only the index's own records come out of a cache file, never an arbitrary object."""
    ALLOWED = {("codecue_lsp.context.types", cls.__name__): cls for cls in (Chunk, Definition, FileEntry)}
    ALLOWED[("builtins", "frozenset")] = frozenset
    ALLOWED[("builtins", "set")] = set

    def find_class(self, module: str, name: str):
        found = self.ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in an index cache")
        return found


def load(cache_dir: str | os.PathLike | None, roots) -> dict[str, Record]:
    """The records of the workspace's last save; {} when none, from another version, or damaged."""
    if cache_dir is None:
        return {}
    path = cache_file(cache_dir, roots)
    try:
        with open(path, "rb") as f:
            data = _Unpickler(io.BytesIO(f.read())).load()
    except FileNotFoundError:
        return {}
    except Exception as exc:  # damaged or foreign: start empty
        logger.info("ignoring the index cache %s: %s", path, exc)
        return {}
    if not isinstance(data, dict) or data.get("version") != version() or not isinstance(data.get("files"), dict):
        return {}
    _touch(path)
    return data["files"]


def save(cache_dir: str | os.PathLike | None, roots, records: dict[str, Record]) -> bool:
    """Write atomically (a temp file then os.replace); False (logged) when it cannot be written."""
    if cache_dir is None:
        return False
    path = cache_file(cache_dir, roots)
    records = {rel: (mtime_ns, size, _without_chunks(entry)) for rel, (mtime_ns, size, entry) in records.items()}
    payload = {"version": version(), "roots": sorted(str(root) for root in roots), "files": records}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)  # mode 0600
        with os.fdopen(fd, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        return True
    except Exception as exc:
        logger.warning("could not save the index cache %s: %s", path, exc)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def _without_chunks(entry: FileEntry | None) -> FileEntry | None:
    return entry if entry is None or not entry.chunks else dataclasses.replace(entry, chunks=())


def _touch(path: Path) -> None:
    """A loaded cache counts as seen (prune goes by modification time)."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune(cache_dir: str | os.PathLike | None, max_age_days: float = MAX_AGE_DAYS) -> list[str]:
    """Delete the caches of workspaces not loaded nor saved for `max_age_days` (and stale temp files);
    returns the deleted file names."""
    if cache_dir is None:
        return []
    limit = time.time() - max_age_days * 86400
    removed = []
    try:
        entries = list(os.scandir(cache_dir))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.endswith((SUFFIX, ".tmp")) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            if entry.stat().st_mtime < limit:
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            continue
    return removed
