"""The project as build_prompt sees it: the repository's name, workspace-relative paths, what may be sent, and the
ranked snippets of other files for a cursor (select.py) from the workspace index (index.py).

One ProjectContext is made per request on the event loop (it holds the recent files at that moment) and read on the
prompt thread; the index it reads is safe to read while it is being built or updated.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote, urlparse

from .files import is_secret_path
from .select import (
    NEAR_LINES_AFTER,
    NEAR_LINES_BEFORE,
    Snippet,
    called_definitions,
    imported_definitions,
    later_uses,
    lines_around,
    lines_back,
    similar_code,
    used_names,
)

logger = logging.getLogger(__name__)


def uri_to_path(uri: str) -> str | None:
    parsed = urlparse(uri or "")
    if parsed.scheme != "file":
        return None
    return os.path.normpath(unquote(parsed.path))


def path_to_uri(path: str) -> str:
    return Path(path).as_uri()


class ProjectContext:
    def __init__(self, index, recent_paths: Sequence[str] = ()) -> None:
        self.index = index
        self.roots = tuple(index.roots)
        self.recent = tuple(recent_paths)  # workspace-relative, most recent first

    @property
    def repo_name(self) -> str:
        return os.path.basename(self.roots[0].rstrip(os.sep)) if len(self.roots) == 1 else "workspace"

    def path_of(self, uri: str) -> str | None:
        """The workspace-relative path of a document, None outside every workspace folder."""
        path = uri_to_path(uri)
        return self.index.relative(path) if path else None

    def uri_of(self, rel: str) -> str:
        return path_to_uri(self.index.absolute(rel))

    def indexed(self, uri: str) -> bool:
        """Whether the index still holds this file (a project snippet's file that was deleted or excluded since
        must leave the prompt)."""
        path = uri_to_path(uri)
        rel = self.index.relative(path) if path else None
        return rel is not None and self.index.entry(rel) is not None

    def allowed(self, uri: str) -> bool:
        """Whether a document's text may go into a prompt as context: not a secret-looking, ignored or excluded
        file. Documents outside the workspace folders (an untitled buffer, another project) are allowed."""
        path = uri_to_path(uri)
        if path is None or self.index.relative(path) is None:
            return not is_secret_path(path or uri)
        return self.index.allowed(path)

    def snippets(self, uri: str, language_id: str, text: str, offset: int, suffix_end: int) -> list[Snippet]:
        """Other files' definitions and similar code, and later uses in this file (path of this file), ranked."""
        path = self.path_of(uri) or ""
        start, end = lines_around(text, offset, NEAR_LINES_BEFORE, NEAR_LINES_AFTER)
        near = text[start:end]
        names = set(used_names(near))
        out: list[Snippet] = []
        try:
            out += imported_definitions(self.index, language_id, path, text, names, near)
            taken = {s.name for s in out}
            local = set(self._local_names(path))
            out += called_definitions(self.index, path, names, near, taken, local)
            out += similar_code(self.index, path, text, offset, self.recent)
        except Exception:  # an index that cannot answer means no project context, never a failed completion
            logger.exception("project context failed for %s", uri)
        # The cursor's line and the one above: the names just introduced, whose later uses show what they are for.
        line_start = text.rfind("\n", 0, offset) + 1
        start, end = lines_back(text, line_start, 1), text.find("\n", offset) % (len(text) + 1)
        cursor_names = [n for n in used_names(text[start:end]) if len(n) > 2]
        for row, line, score in later_uses(text, suffix_end, cursor_names):
            out.append(Snippet(path, line, score, "use", row, row))
        return out

    def _local_names(self, path: str) -> list[str]:
        return [d.name for d in self.index.definitions_in(path)] if path else []

