"""Context pieces for the prompt: imports and definition signatures, ranked by relevance to the cursor."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .text import CALLED_NAME, IDENTIFIER

MAX_WHOLE_DECLARATION_CHARS = 300
MAX_MEMBERS = 30
MAX_CANDIDATES = 200
# Keywords and very common names say nothing about relevance.
_COMMON_WORDS = frozenset("""def class return self cls if else elif for while in is not and or import from as
with try except finally raise pass None True False function const let var new this fn pub impl use mut struct enum
func type package interface public private protected static void int char long float double bool boolean string
String auto unsigned include namespace template typename async await yield lambda of""".split())
IMPORT_SCORE, CALLED_SCORE, SAME_FILE_SCORE, MAX_OVERLAP_SCORE = 50, 100, 10, 20


@dataclass
class OutlineItem:
    kind: str          # "import" or "signature"
    name: str
    text: str
    start_row: int
    end_row: int
    identifiers: frozenset[str] = field(default=frozenset())


def _identifiers(text: str) -> frozenset[str]:
    return frozenset(IDENTIFIER.findall(text)) - _COMMON_WORDS


def _unwrap(node, spec):
    if node.type in spec.wrappers:
        inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
        if inner is None:
            named = [c for c in node.named_children if c.type in spec.definitions]
            inner = named[0] if named else None
        return inner if inner is not None else node
    return node


def definition_name(view, node) -> str:
    name = node.child_by_field_name("name")
    if name is None and node.type == "impl_item":
        name = node.child_by_field_name("type")
    declarator = node.child_by_field_name("declarator")
    while name is None and declarator is not None:  # C/C++: int *f(int) -> pointer/function declarators
        inner = declarator.child_by_field_name("declarator")
        if inner is None:
            name = declarator.child_by_field_name("name") or declarator
        declarator = inner
    if name is None and node.type == "type_declaration" and node.named_child_count:
        name = node.named_children[0].child_by_field_name("name")
    return view.node_text(name) if name is not None else ""


def _line_indent(view, node, default: str = "") -> str:
    """The indentation of the node's line, or `default` when code precedes the node on that line."""
    line_start = view.source.rfind(b"\n", 0, node.start_byte) + 1
    before = view.source[line_start:node.start_byte]
    return before.decode("utf-8", "replace") if not before.strip() and line_start < node.start_byte else default


def signature(view, node, spec) -> str:
    """A definition without its body: `def f(x): ...`, `int f(int x) { ... }`, a class with its members'."""
    body = node.child_by_field_name("body")
    if body is None or body.start_byte <= node.start_byte:
        text = view.node_text(node)
        return text if len(text) <= MAX_WHOLE_DECLARATION_CHARS else text.split("\n", 1)[0]
    header = view.node_text(node, end_byte=body.start_byte).rstrip()
    if not spec.braces:
        header = header + " ..." if node.type not in spec.containers else header
    function_like = any(word in node.type for word in ("function", "method", "constructor"))
    if node.type not in spec.containers:
        if function_like or not spec.braces:
            return header if not spec.braces else f"{header.rstrip('{').rstrip()} {{ ... }}"
        whole = view.node_text(node)
        return whole if len(whole) <= MAX_WHOLE_DECLARATION_CHARS else f"{header.rstrip('{').rstrip()} {{ ... }}"
    members = []
    for child in body.named_children[: MAX_MEMBERS * 4]:
        inner = _unwrap(child, spec)
        if inner.type in spec.definitions and len(members) < MAX_MEMBERS:
            members.append(_line_indent(view, child, "    ") + signature(view, inner, spec))
    if not spec.braces:
        return "\n".join([header] + (members or [_line_indent(view, body) + "..."]))
    opening = header if header.endswith("{") else header + " {"
    return "\n".join([opening] + members + [_line_indent(view, node) + "}"])


def outline_items(view) -> list[OutlineItem]:
    """Imports and top-level definition signatures of a parsed view, in document order."""
    spec = view.spec
    items = []
    for node in view.tree.root_node.named_children:
        inner = _unwrap(node, spec)
        start_row = node.start_point[0] + view.row_offset
        end_row = node.end_point[0] + view.row_offset
        if node.type in spec.imports or inner.type in spec.imports:
            text = view.node_text(node).strip()
            items.append(OutlineItem("import", "", text, start_row, end_row, _identifiers(text)))
        elif inner.type in spec.definitions:
            text = signature(view, inner, spec)
            items.append(OutlineItem("signature", definition_name(view, inner), text, start_row, end_row,
                                     _identifiers(text)))
    return items


@dataclass
class Candidate:
    item: OutlineItem
    source: int        # 0 = the current file, 1.. = other open documents in the order given
    score: float


def rank_items(current: list[OutlineItem], others: list[list[OutlineItem]], near_text: str,
               cursor_row: int, visible_rows: tuple[int, int]) -> list[Candidate]:
    """Items by relevance: called near the cursor > imports of this file > same file > other files;
    identifier overlap with the text near the cursor breaks ties. Items already visible are left out."""
    called = set(CALLED_NAME.findall(near_text))
    near = _identifiers(near_text)
    first_visible, last_visible = visible_rows
    candidates = []
    for source, items in enumerate([current] + list(others)):
        for item in items:
            if source == 0 and item.start_row <= last_visible and item.end_row >= first_visible:
                continue
            if item.kind == "import" and source != 0:
                continue
            score = min(len(item.identifiers & near), MAX_OVERLAP_SCORE)
            if item.kind == "import":
                score += IMPORT_SCORE
            elif item.name and item.name in called:
                score += CALLED_SCORE
            if source == 0:
                score += SAME_FILE_SCORE
            # Closer definitions of the same file win ties (a small fraction, never above one overlap point).
            distance = abs(item.start_row - cursor_row) if source == 0 else 10**6
            candidates.append(Candidate(item, source, score - min(distance, 10**6) / 10**7))
    candidates.sort(key=lambda c: (-c.score, c.source, c.item.start_row))
    return candidates[:MAX_CANDIDATES]


def select_items(candidates: list[Candidate], budget: int, count_tokens: Callable[[str], int],
                 header_tokens: Callable[[int], int]) -> dict[int, list[OutlineItem]]:
    """Greedy fill of `budget` tokens in rank order; `header_tokens(source)` is the cost of a file's header,
    paid by its first item. Returns source -> items in document order (a stable layout for the KV cache)."""
    chosen: dict[int, list[OutlineItem]] = {}
    seen: set[tuple[int, str]] = set()
    used = 0
    for candidate in candidates:
        if (candidate.source, candidate.item.text) in seen or _overlaps_chosen(candidate, chosen):
            continue
        cost = count_tokens(candidate.item.text + "\n")
        if candidate.source not in chosen:
            cost += header_tokens(candidate.source)
        if used + cost > budget:
            continue
        used += cost
        seen.add((candidate.source, candidate.item.text))
        chosen.setdefault(candidate.source, []).append(candidate.item)
    for items in chosen.values():
        items.sort(key=lambda item: item.start_row)
    return chosen


def _overlaps_chosen(candidate: Candidate, chosen: dict[int, list[OutlineItem]]) -> bool:
    """A project snippet (another file's definition or similar code) that shares lines with one already chosen
    from the same file would show those lines twice."""
    item = candidate.item
    if item.kind != PROJECT:
        return False
    return any(other.kind == PROJECT and other.start_row <= item.end_row and item.start_row <= other.end_row
               for other in chosen.get(candidate.source, ()))


PROJECT, LATER_USE = "project", "use"


def merge_project(candidates: list[Candidate], snippets, project, sources: list[str],
                  first_row: int = 0) -> list[Candidate]:
    """The open documents' and this file's ranked items with the project's snippets (context/select.py) among
    them by score. Another file's snippet joins that file's source (appended to `sources`, document uris, when the
    file is not open); a later use in this file joins source 0."""
    merged = list(candidates)
    for snippet in snippets:
        if snippet.kind == LATER_USE:
            source, kind = 0, LATER_USE
        else:
            uri = project.uri_of(snippet.path)
            if uri == sources[0]:
                continue
            if uri not in sources:
                sources.append(uri)
            source, kind = sources.index(uri), PROJECT
        item = OutlineItem(kind, snippet.kind, snippet.text, snippet.start_line, snippet.end_line,
                           _identifiers(snippet.text))
        merged.append(Candidate(item, source, snippet.score))
    merged.sort(key=lambda c: (-c.score, c.source, c.item.start_row))
    return merged[:MAX_CANDIDATES]
