"""The ceiling of definition context, `codecue-bench context --settings ceiling`: every cross-file hole completed with
exactly the definitions of the project names its line uses, in the server's own prompt (prompt builder, budget,
engine; in-process, the same settings as the benchmark's server).

No ranking can know those names before the line is typed (the hole's line is blank), so this bounds what any choice
of definitions can add: where it scores no better than the current file alone, what limits the cross-file figure is
the model guessing which statement comes next, not which definitions the prompt shows.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from codecue_lsp.context.index import WorkspaceIndex
from codecue_lsp.context.project import ProjectContext
from codecue_lsp.context.select import definition_snippet

from .crossfile import Hole, blanked, typed
from .timing import ms

CEILING = "ceiling"
CEILING_SCORE = 500  # above every ranked item: the definitions always go in


class HoleDefinitions(ProjectContext):
    """A project context that shows only the definitions of the names a hole's line uses (`Hole.names`), from the
    files that define them (`Hole.files`)."""

    def __init__(self, index: WorkspaceIndex, hole: Hole) -> None:
        super().__init__(index)
        self.hole = hole

    def snippets(self, uri, language_id, text, offset, suffix_end):
        out = []
        for name in dict.fromkeys(n.split(".")[-1] for n in self.hole.names):
            found = [d for f in self.hole.files for d in self.index.definitions_in(f) if d.name == name]
            top_level = [d for d in found if "." not in d.qualified]
            if found:
                out.append(definition_snippet((top_level or found)[0], CEILING_SCORE))
        return out


def ceiling_rows(roots: dict[str, Path], holes: list[Hole], pair: str, score) -> list[dict]:
    """Each hole completed in-process with HoleDefinitions as its project context; rows as the server settings'."""
    from codecue_lsp.completer import Completer
    from codecue_lsp.config import Settings
    from codecue_lsp.prompt import OpenDocument, SyntaxCache
    from engine.engine import Engine
    from engine.loading.pair import load_pair

    settings = dataclasses.replace(Settings(), pair=pair, cold_prompt_tokens="off")
    engine = Engine(load_pair(pair))
    completer = Completer(engine, SyntaxCache())
    indexes: dict[str, WorkspaceIndex] = {}
    rows = []
    try:
        for hole in holes:
            root = roots[hole.project]
            if hole.project not in indexes:
                indexes[hole.project] = WorkspaceIndex([str(root)], languages=("python",), cache_dir=None)
                indexes[hole.project].build()
            index, path = indexes[hole.project], root / hole.path
            original = path.read_text(encoding="utf-8")
            index.update(str(path), blanked(original, hole.line))  # as the server's index sees the saved file
            try:
                doc = OpenDocument(uri=path.as_uri(), language_id="python",
                                   text=typed(original, hole.line, hole.indent))
                completer.layouts.forget(doc.uri)
                started = time.perf_counter()
                prepared = completer.prepare(doc, hole.line, len(hole.indent), settings,
                                             project=HoleDefinitions(index, hole))
                text, _ = completer.complete(prepared)
                latency = ms(time.perf_counter() - started)
            finally:
                index.update(str(path), original)
            line = hole.indent + text.split("\n", 1)[0]
            exact, similarity = score(line, hole.expected)
            built = prepared.built
            rows.append({"project": hole.project, "path": hole.path, "line": hole.line, "kind": hole.kind,
                         "setting": CEILING, "expected": hole.expected, "answer": line, "exact": exact,
                         "similarity": round(similarity, 4), "cold_ms": latency,
                         "prompt_tokens": len(prepared.request.prompt_ids),
                         "context_tokens": built.sections.get("context"), "context_files": built.context_files})
    finally:
        engine.close()
    return rows
