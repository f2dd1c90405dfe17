"""The index's records: plain, immutable, picklable (the on-disk cache stores them). Slotted: an index holds
hundreds of thousands of them, and slots spare each one a __dict__."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Definition:
    name: str            # the bare name: "parse", "Client", "send" (a method's own name)
    qualified: str       # "parse", "Client", "Client.send"
    kind: str            # "function" | "class" | "method" | "variable" | "type"
    signature: str       # prompt text: the definition without its body ("def f(x): ...", "class C(Base):")
    doc: str             # first line of its docstring or leading comment; "" when none
    path: str            # workspace-relative path, "/" separators
    line: int            # 0-based row where it starts
    end_line: int        # 0-based row where it ends


@dataclass(frozen=True, slots=True)
class Chunk:
    """A window of a file's lines for lexical retrieval; its text stays in the file (WorkspaceIndex.chunk_text)."""
    path: str
    start_line: int      # 0-based, inclusive
    end_line: int        # 0-based, exclusive


@dataclass(frozen=True, slots=True)
class ImportRef:
    """One name (or module) a file imports, as written; resolved to workspace files by imports.resolve."""
    language_id: str
    module: str          # as written: ".utils", "pkg.mod", "./util", "github.com/x/y/pkg", "crate::a::b", "a/b.h"
    name: str | None     # the imported member ("helper" of `from .x import helper`); None for a whole module
    local: str           # the name it is bound to in the importing file ("h" of `import helper as h`)


@dataclass(slots=True)
class FileEntry:
    path: str                       # workspace-relative, "/" separators
    language_id: str
    mtime_ns: int
    size: int
    definitions: tuple[Definition, ...] = ()
    chunks: tuple[Chunk, ...] = ()
    symbols: frozenset[str] = field(default_factory=frozenset)  # every definition's bare name, for quick lookups
