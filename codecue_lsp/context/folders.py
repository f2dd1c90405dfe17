"""Workspace folders and the index's paths: relative to the one folder, or prefixed by each folder's name when
there are several ("proj/src/a.py")."""
from __future__ import annotations

import os
from typing import Sequence


class WorkspaceFolders:
    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(os.path.normpath(os.path.abspath(root)) for root in roots)
        self.prefixes = self._prefixes(self.roots)

    @staticmethod
    def _prefixes(roots: tuple[str, ...]) -> tuple[str, ...]:
        """"" for a single folder; else each folder's name (made unique) and a slash."""
        if len(roots) <= 1:
            return ("",) * len(roots)
        names: list[str] = []
        for root in roots:
            base = os.path.basename(root) or "root"
            name, n = base, 2
            while name in names:
                name, n = f"{base}-{n}", n + 1
            names.append(name)
        return tuple(name + "/" for name in names)

    def locate(self, abs_path: str) -> tuple[int, str] | None:
        """(root index, path inside that root with "/" separators) for the deepest root holding the path."""
        path = os.path.normpath(os.path.abspath(abs_path))
        best = None
        for i, root in enumerate(self.roots):
            if path.startswith(root + os.sep) and (best is None or len(root) > len(self.roots[best])):
                best = i
        if best is None:
            return None
        return best, path[len(self.roots[best]) + 1:].replace(os.sep, "/")

    def relative(self, abs_path: str) -> str | None:
        located = self.locate(abs_path)
        return self.prefixes[located[0]] + located[1] if located else None

    def split(self, rel: str) -> tuple[int, str] | None:
        for i, prefix in enumerate(self.prefixes):
            if rel.startswith(prefix) and (prefix or len(self.roots) == 1):
                return i, rel[len(prefix):]
        return None

    def absolute(self, rel: str) -> str:
        located = self.split(rel)
        if located is None:
            raise ValueError(f"not a workspace path: {rel!r}")
        return os.path.join(self.roots[located[0]], *located[1].split("/"))
