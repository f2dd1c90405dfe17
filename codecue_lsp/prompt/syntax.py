"""Tree-sitter parsing: incremental trees per open document, and the syntax facts the prompt rules ask for.

Every answer is in document rows (0-based, split on "\\n" like tree-sitter). A `SyntaxView` may cover only a
window of a huge document; its `row_offset` maps tree rows to document rows.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .context import outline_items
from .languages import LanguageSpec, load_language, spec_for
from .text import common_prefix_length, common_suffix_length, encode, sanitize

# Documents larger than this are not parsed whole; the prompt builder parses a window around the cursor.
MAX_PARSE_BYTES = 1_000_000

BLOCK_TYPES = frozenset({
    "module", "program", "source_file", "translation_unit", "block", "statement_block", "class_body",
    "interface_body", "enum_body", "statement_list", "declaration_list", "field_declaration_list",
    "compound_statement", "switch_body", "switch_block", "constructor_body", "ERROR",
})


def new_parser(language_id: str):
    """(Parser, LanguageSpec) for a languageId, or (None, None) for the line-based fallback."""
    spec = spec_for(language_id)
    language = load_language(spec.name) if spec else None
    if language is None:
        return None, None
    from tree_sitter import Parser

    return Parser(language), spec


def parse_bytes(language_id: str, source: bytes):
    parser, _ = new_parser(language_id)
    if parser is None:
        return None
    try:
        return parser.parse(source)
    except Exception:  # never let a parser problem break a completion
        return None


def _point(source: bytes, offset: int) -> tuple[int, int]:
    row = source.count(b"\n", 0, offset)
    return row, offset - (source.rfind(b"\n", 0, offset) + 1)


def text_edit(old: bytes, new: bytes) -> dict | None:
    """The single-range edit turning `old` into `new`, as keyword arguments for `Tree.edit`; None if equal."""
    if old == new:
        return None
    start = common_prefix_length(old, new)
    tail = common_suffix_length(old, new, min(len(old), len(new)) - start)
    old_end, new_end = len(old) - tail, len(new) - tail
    return dict(start_byte=start, old_end_byte=old_end, new_end_byte=new_end,
                start_point=_point(old, start), old_end_point=_point(old, old_end),
                new_end_point=_point(new, new_end))


@dataclass
class _Entry:
    language_id: str
    source: bytes
    text: str
    tree: object | None
    outline: list | None = None


class SyntaxCache:
    """Incremental tree-sitter trees per document URI. Thread-safe; never raises on odd text."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._parsers: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def _parser(self, language_id: str):
        if language_id not in self._parsers:
            self._parsers[language_id] = new_parser(language_id)
        return self._parsers[language_id][0]

    def update(self, uri: str, language_id: str, text: str) -> None:
        text = sanitize(text or "")
        with self._lock:
            source = encode(text)
            entry = self._entries.get(uri)
            parser = self._parser(language_id)
            tree = None
            if parser is not None and len(source) <= MAX_PARSE_BYTES:
                old_tree = None
                if entry is not None and entry.tree is not None and entry.language_id == language_id:
                    edit = text_edit(entry.source, source)
                    if edit is None:
                        entry.text = text
                        return
                    old_tree = entry.tree
                    old_tree.edit(**edit)
                try:
                    tree = parser.parse(source, old_tree) if old_tree is not None else parser.parse(source)
                except Exception:
                    tree = None
            self._entries[uri] = _Entry(language_id, source, text, tree)

    def tree(self, uri: str):
        entry = self._entries.get(uri)
        return entry.tree if entry else None

    def text(self, uri: str) -> str | None:
        entry = self._entries.get(uri)
        return entry.text if entry else None

    def close(self, uri: str) -> None:
        with self._lock:
            self._entries.pop(uri, None)

    def view(self, uri: str, language_id: str, text: str) -> "SyntaxView | None":
        """A whole-document view, updating the tree first when `text` is newer than what the cache holds."""
        text = sanitize(text or "")
        entry = self._entries.get(uri)
        if entry is None or entry.text != text or entry.language_id != language_id:
            self.update(uri, language_id, text)
            entry = self._entries.get(uri)
        if entry is None or entry.tree is None:
            return None
        view = SyntaxView(entry.tree, spec_for(language_id), entry.source, 0)
        if entry.outline is None:
            entry.outline = view.outline()
        view.cached_outline = entry.outline
        return view


class SyntaxView:
    def __init__(self, tree, spec: LanguageSpec, source: bytes, row_offset: int) -> None:
        self.tree = tree
        self.spec = spec
        self.source = source
        self.row_offset = row_offset
        self.cached_outline: list | None = None

    def _row(self, point) -> int:
        return point[0] + self.row_offset

    def node_text(self, node, end_byte: int | None = None) -> str:
        return self.source[node.start_byte: node.end_byte if end_byte is None else end_byte].decode(
            "utf-8", "surrogatepass") if self._valid(node) else ""

    def _valid(self, node) -> bool:
        return 0 <= node.start_byte <= node.end_byte <= len(self.source)

    def ancestors(self, row: int, column_bytes: int) -> list:
        """Nodes containing the point, innermost first (the root last)."""
        point = (max(row - self.row_offset, 0), column_bytes)
        node = self.tree.root_node.descendant_for_point_range(point, point)
        chain = []
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain or [self.tree.root_node]

    def has_error_around(self, ancestors: list) -> bool:
        return any(node.type == "ERROR" or node.is_missing for node in ancestors)

    def prefix_boundaries(self, ancestors: list, cursor_row: int) -> list[int]:
        """Rows before the cursor where a statement of the cursor's enclosing blocks (or the file) begins."""
        rows = set()
        for node in ancestors:
            if node.type not in BLOCK_TYPES and node.parent is not None:
                continue
            previous = None
            for child in node.named_children:
                row = self._row(child.start_point)
                if row > cursor_row:
                    break
                attached = previous is not None and previous.type in self.spec.attached  # its attribute's row
                if (child.type != "comment" or row == self._row(node.start_point)) and not attached:
                    rows.add(row)
                previous = child
        return sorted(rows)

    def suffix_boundaries(self, ancestors: list, cursor_row: int) -> list[int]:
        """Rows after the cursor where a statement of the enclosing blocks (or an enclosing block) ends."""
        rows = set()
        for node in ancestors:
            if node.type not in BLOCK_TYPES and node.parent is not None:
                continue
            rows.add(self._row(node.end_point))
            for child in node.named_children:
                row = self._row(child.end_point)
                if row >= cursor_row and child.type not in self.spec.attached:
                    rows.add(row)
        return sorted(r for r in rows if r >= cursor_row)

    def definition_starts(self, ancestors: list) -> list[int]:
        """Start rows of the definitions (functions, classes, ...) enclosing the cursor, innermost first."""
        wrappers = self.spec.wrappers
        rows = []
        for node in ancestors:
            if node.type in self.spec.definitions:
                parent = node.parent
                start = parent if parent is not None and parent.type in wrappers else node
                while start.prev_named_sibling is not None and start.prev_named_sibling.type in self.spec.attached:
                    start = start.prev_named_sibling
                rows.append(self._row(start.start_point))
        return rows

    def last_token_before(self, row: int, column_bytes: int):
        """The last non-comment leaf that starts before the point (used to spot block headers), or None."""
        point = (max(row - self.row_offset, 0), column_bytes)
        node = self.tree.root_node
        while node.child_count:
            last = None
            for child in node.children:
                if tuple(child.start_point) >= point:
                    break
                if child.type != "comment":
                    last = child
            if last is None:
                return None
            node = last
        return node

    def outline(self) -> list:
        """Imports and definition signatures of the parsed text (document order); cached per tree."""
        if self.cached_outline is not None:
            return self.cached_outline

        return outline_items(self)


def parse_window(language_id: str, text: str, start: int, end: int, start_row: int) -> SyntaxView | None:
    """Parse text[start:end] alone (for documents too large to parse whole)."""
    spec = spec_for(language_id)
    tree = parse_bytes(language_id, encode(text[start:end])) if spec else None
    if tree is None:
        return None
    return SyntaxView(tree, spec, encode(text[start:end]), start_row)


def parse_document(language_id: str, text: str) -> SyntaxView | None:
    return parse_window(language_id, text, 0, len(text), 0)
