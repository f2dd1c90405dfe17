"""Which other files' code goes into a prompt: ranked snippets, for build_prompt to fit into the context budget.

Three kinds, best first (scores are on the scale of prompt/context.py's rank_items, so they compete with the open
documents' outlines in one greedy fill):
  a. definitions of the names used near the cursor that this file imports from the project, found through its
     imports (resolve.py), else by a name defined once in the index;
  b. code similar to the lines before the cursor (retrieval.py), recently viewed or edited files first;
  c. later uses in this file of the names on the cursor's lines, past the suffix the prompt shows.
A definition a file shows twice (an open document's outline, an imported one) is deduplicated by build_prompt's
greedy fill: items are keyed by file and text.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..prompt.text import CALLED_NAME, IDENTIFIER
from .imports import parse_imports
from .resolve import resolve

# Every definition of one kind ranks alike (ties go by file, then row: a stable layout); imported ones first.
IMPORTED_SCORE, IMPORTED_BY_NAME_SCORE, CALLED_SCORE, SIMILAR_SCORE, LATER_USE_SCORE = 180, 100, 80, 40, 30
NEAR_LINES_BEFORE, NEAR_LINES_AFTER = 20, 3
QUERY_LINES = 20
SIMILAR_CHUNKS = 6
# Below this Jaccard similarity a chunk shares only common words with the cursor's code: noise in the prompt.
MIN_SIMILARITY = 0.12
LATER_USES_PER_NAME, LATER_USE_NAMES = 2, 4
RECENT_BOOST = 1.5


def members_used(near: str, local: str) -> list[str]:
    """Names used as `local.name` (or `local::name`) in `near`; `local` may be dotted (`import a.b`)."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(local)}\s*(?:\.|::)\s*([A-Za-z_][A-Za-z0-9_]*)")
    return list(dict.fromkeys(pattern.findall(near)))


@dataclass(frozen=True)
class Snippet:
    path: str            # workspace-relative path of the file it comes from
    text: str            # prompt text
    score: float
    kind: str            # "definition" | "similar" | "use"
    start_line: int
    end_line: int
    name: str = ""       # a definition's name


def lines_back(text: str, offset: int, lines: int) -> int:
    """Where the text `lines` line breaks back from `offset` starts (at that line break; 0 at the top)."""
    start = offset
    for _ in range(lines):
        start = text.rfind("\n", 0, max(start - 1, 0)) if start > 0 else -1
        if start < 0:
            return 0
    return start


def lines_around(text: str, offset: int, before: int, after: int) -> tuple[int, int]:
    """(start, end) offsets of the text from `before` + 1 line breaks back to `after` + 1 line breaks on."""
    end = offset
    for _ in range(after + 1):
        found = text.find("\n", end + 1)
        if found < 0:
            return lines_back(text, offset, before + 1), len(text)
        end = found
    return lines_back(text, offset, before + 1), end


def used_names(near: str) -> list[str]:
    """The names in `near`, in order of appearance (each once; dotted uses count both parts)."""
    return list(dict.fromkeys(IDENTIFIER.findall(near)))


def imported_definitions(index, language_id: str, path: str, text: str, names: set[str],
                         near: str) -> list[Snippet]:
    """(a): definitions of the names this file imports and uses near the cursor, resolved to project files."""
    out: list[Snippet] = []
    known = index.paths()
    seen: set[tuple[str, str]] = set()
    for ref in parse_imports(language_id, text):
        wanted: list[tuple[str, float]] = []
        # Only names used near the cursor: every imported definition ranked in (imported but not used nearby too)
        # completed fewer cross-file lines (docs/performance.md, "Levers measured and set aside").
        if ref.name and ref.name != "*" and ref.local in names:
            wanted.append((ref.name, IMPORTED_SCORE))
        if ref.local:
            # A module (or class) bound to a name: `mod.helper` or `pkg.mod.helper` near the cursor wants helper.
            wanted.extend((member, IMPORTED_SCORE) for member in members_used(near, ref.local))
        if not wanted:
            continue
        files = resolve(ref, path, known)
        for name, score in wanted:
            definition = _defined_in(index, files, name)
            if definition is None and score == IMPORTED_SCORE:
                definition, score = _unique(index, name, exclude=path), IMPORTED_BY_NAME_SCORE
            if definition is None or (definition.path, definition.qualified) in seen:
                continue
            seen.add((definition.path, definition.qualified))
            out.append(definition_snippet(definition, score))
    return out


def called_definitions(index, path: str, names: set[str], near: str, taken: set[str],
                       local_names: set[str]) -> list[Snippet]:
    """Names called near the cursor that this file neither defines nor imports, defined once in the project
    (a method called on an object of a project class, a helper re-exported through a package)."""
    out = []
    for name in dict.fromkeys(CALLED_NAME.findall(near)):
        if name in taken or name in local_names or name not in names:
            continue
        definition = _unique(index, name, exclude=path)
        if definition is not None:
            out.append(definition_snippet(definition, CALLED_SCORE))
    return out


def similar_code(index, path: str, text: str, offset: int, recent: Iterable[str]) -> list[Snippet]:
    """(b): chunks of other files like the lines before the cursor; recently viewed or edited files first."""
    start = lines_back(text, offset, QUERY_LINES)
    query = text[start:offset]
    if not query.strip():
        return []
    boost = {p: RECENT_BOOST for p in recent if p != path}
    out = []
    for score, chunk in index.similar(query, SIMILAR_CHUNKS, exclude_path=path, boost_paths=boost):
        if score / boost.get(chunk.path, 1.0) < MIN_SIMILARITY:
            continue
        body = (index.chunk_text(chunk) or "").strip("\n")  # read from the file: the index keeps no chunk text
        if body.strip():
            out.append(Snippet(chunk.path, body, SIMILAR_SCORE * min(score, 1.0) * 2, "similar", chunk.start_line,
                               chunk.end_line))
    return out


def later_uses(text: str, suffix_end: int, names: Sequence[str]) -> list[tuple[int, str, float]]:
    """(c): (row, line, score) of lines past the suffix that use the names on the cursor's lines: how a name
    just introduced is used further down (its callers, its attributes)."""
    out = []
    if suffix_end >= len(text):
        return out
    first_row = text.count("\n", 0, suffix_end) + 1
    rest = text[suffix_end:].split("\n")[1:]
    for name in list(names)[:LATER_USE_NAMES]:
        pattern = re.compile(rf"\b{re.escape(name)}\b")
        found = 0
        for i, line in enumerate(rest):
            if pattern.search(line) and line.strip():
                out.append((first_row + i, line.rstrip(), LATER_USE_SCORE - found))
                found += 1
                if found >= LATER_USES_PER_NAME:
                    break
    return out


def _defined_in(index, files: Sequence[str], name: str):
    for file in files:
        for definition in index.definitions_in(file):
            if definition.name == name and "." not in definition.qualified:
                return definition
    return None


def _unique(index, name: str, exclude: str):
    found = [d for d in index.definitions_named(name) if d.path != exclude and d.kind != "method"]
    if len(found) == 1:
        return found[0]
    methods = [d for d in index.definitions_named(name) if d.path != exclude]
    return methods[0] if len(methods) == 1 else None


def definition_snippet(definition, score: float) -> Snippet:
    text = definition.signature
    if definition.doc and definition.doc not in text and definition.path.endswith((".py", ".pyi")):
        text = with_doc(text, definition.doc)
    return Snippet(definition.path, text, score, "definition", definition.line, definition.end_line, definition.name)


def with_doc(signature: str, doc: str) -> str:
    """A Python signature keeps its first docstring line under its header, indented as the body is:
    `def f(x): ...` becomes `def f(x):` / `    \"\"\"doc\"\"\"` / `    ...`; a header over several lines gets it
    after the line that ends it. Anything else (a brace language's signature) is left as it is."""
    lines = signature.split("\n")
    for i, line in enumerate(lines):
        stripped = line.rstrip()
        elided = stripped.endswith(": ...")
        if not (elided or stripped.endswith(":")):
            continue
        indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())] + "    "
        header = stripped[:-4] if elided else line
        body = [f'{indent}"""{doc}"""'] + ([f"{indent}..."] if elided else [])
        return "\n".join(lines[:i] + [header] + body + lines[i + 1:])
    return signature


def relative_path(roots: Sequence[str], path: str) -> str | None:
    for root in roots:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            continue
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return None
