"""The workspace index's life in the server: built in a background thread from the workspace folders, kept current
from the editor's events, and handed to prompts as a ProjectContext.

Every index write (the build, a saved or changed file) runs on one worker thread, in order; completion requests only
read. The build reports `$/progress` through the callbacks the server gives (it answers completions meanwhile: a
prompt built before the index is ready has less context, never a wait).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

from .cache import prune
from .index import WorkspaceIndex
from .project import ProjectContext, uri_to_path

logger = logging.getLogger(__name__)

RECENT_FILES = 20
CACHE_MAX_AGE_DAYS = 30


class ProjectService:
    def __init__(self, cache_home: Path | None) -> None:
        self.cache_home = cache_home  # $CODECUE_HOME/context, or None: no cache on disk
        self.index: WorkspaceIndex | None = None
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-index")
        self.recent: OrderedDict[str, None] = OrderedDict()  # workspace-relative paths, most recent last
        self.build_seconds: float | None = None
        self.cancel = threading.Event()
        self._build: Future | None = None
        self.watched = False  # the client watches files for us (workspace/didChangeWatchedFiles registered)

    # --- life ----------------------------------------------------------------------------------------------------
    def start(self, roots: Sequence[str], settings, open_uris: Sequence[str] = (),
              progress: Callable[[str, int, int], None] | None = None) -> Future | None:
        """Index `roots` (absolute folder paths) in the background; None when there is nothing to index."""
        roots = [r for r in dict.fromkeys(roots) if r and Path(r).is_dir()]
        self.cancel.set()  # a build of the folders before (workspace folders changed) stops at its next file
        self.cancel = threading.Event()
        if not roots or not settings.context:
            self.index = None
            return None
        cache_dir = str(self.cache_home) if (settings.index_cache and self.cache_home is not None) else None
        self.index = WorkspaceIndex(roots, languages=settings.enabled_languages, exclude_globs=settings.exclude_globs,
                                    max_files=settings.max_indexed_files, cache_dir=cache_dir)
        open_paths = [p for p in (uri_to_path(u) for u in open_uris) if p]
        self._build = self.worker.submit(self._run_build, self.index, self.cancel, cache_dir, open_paths, progress)
        return self._build

    def _run_build(self, index, cancel, cache_dir, open_paths, progress) -> None:
        started = time.monotonic()
        if progress:
            progress("begin", 0, 0)
        try:
            if cache_dir:
                prune(cache_dir, max_age_days=CACHE_MAX_AGE_DAYS)
            index.build(progress=(lambda done, total: progress("report", done, total)) if progress else None,
                        cancel=cancel, open_paths=open_paths)
        except Exception:
            logger.exception("indexing the workspace failed; completions go on without project context")
        finally:
            self.build_seconds = time.monotonic() - started
            if progress:
                progress("end", 0, 0)
        stats = index.stats()
        logger.info("workspace indexed: %d files, %d definitions in %.1f s", stats.get("files", 0),
                    stats.get("definitions", 0), self.build_seconds)

    def shutdown(self) -> None:
        self.cancel.set()
        self.worker.shutdown(wait=False, cancel_futures=True)

    # --- events --------------------------------------------------------------------------------------------------
    def viewed(self, uri: str) -> None:
        """An opened or edited document: its file comes first among similar code."""
        rel = self._relative(uri)
        if rel is not None:
            self.recent[rel] = None
            self.recent.move_to_end(rel)
            while len(self.recent) > RECENT_FILES:
                self.recent.popitem(last=False)

    def saved(self, uri: str, text: str | None) -> Future | None:
        """Re-index the saved file (from the editor's text when given); then, where the client does not watch
        files for us, look for files changed on disk meanwhile (a checkout, a generator)."""
        path = uri_to_path(uri)
        if self.index is None or path is None:
            return None
        return self.worker.submit(self._update, path, text, True)

    def files_changed(self, changes: Sequence[tuple[str, str]]) -> Future | None:
        """workspace/didChangeWatchedFiles: (uri, "created" | "changed" | "deleted") each."""
        if self.index is None:
            return None
        return self.worker.submit(self._apply_changes, list(changes))

    def _update(self, path: str, text: str | None, refresh: bool) -> None:
        try:
            self.index.update(path, text)
            if refresh and not self.watched:
                self.index.refresh_changed()
        except Exception:
            logger.exception("re-indexing %s failed", path)

    def _apply_changes(self, changes) -> None:
        for uri, kind in changes:
            path = uri_to_path(uri)
            if path is None:
                continue
            try:
                if kind == "deleted":
                    self.index.remove(path)
                elif Path(path).is_dir():
                    self.index.refresh_changed()
                else:
                    self.index.update(path)
            except Exception:
                logger.exception("re-indexing %s failed", path)

    # --- reads ---------------------------------------------------------------------------------------------------
    def project_for(self, uri: str, settings) -> ProjectContext | None:
        """The project a prompt for `uri` sees; None with context off or without workspace folders."""
        if self.index is None or not settings.context:
            return None
        recent = [p for p in reversed(self.recent)]
        return ProjectContext(self.index, recent)

    def stats(self) -> dict:
        if self.index is None:
            return {"enabled": False}
        out = dict(self.index.stats())
        out["enabled"] = True
        out["build_seconds"] = None if self.build_seconds is None else round(self.build_seconds, 2)
        out["indexing"] = bool(self._build is not None and not self._build.done())
        return out

    def _relative(self, uri: str) -> str | None:
        path = uri_to_path(uri)
        return self.index.relative(path) if (self.index is not None and path) else None
