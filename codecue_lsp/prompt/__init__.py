"""The fill-in-the-middle prompt for a cursor: stable context first, then the current file around the cursor.

    fim.prefix + [other open files' imports/signatures] + [this file's header, imports, signatures]
               + [this file from a syntactic boundary to the cursor] + fim.suffix + [short suffix] + fim.middle

middle_from="line" (the server's default): the typed part of the cursor's line goes after the middle marker, as the
start of the middle. Typing on a line then changes only the prompt's last tokens and the KV cache keeps the suffix
(PSM puts it after the prefix, so with the cursor split every keystroke re-runs it: keystrokes mid-file over twice as
slow on 2 cores). Unhealed, the model continues a forced middle badly (a trailing space, an open bracket: far fewer
lines exact on typed holes), so whoever uses it must heal the last typed token (engine/decode/healing.py, as
completer.encode_built does): healed, more lines exact than the cursor split (docs/performance.md, "Drafting modes
and switches"). build_prompt's own
default stays "cursor", the split that needs no healing (remote engines). After Enter the middle keeps starting at
the line where it started, for up to `middle_lines` lines (layout.middle_start), so the suffix is not re-run either.

It is built as pieces (user text vs template marker, see fim.py) for Engine.encode_prompt, never as one string to
tokenize: the user's text may contain the markers' strings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from . import budget as budgeting
from .context import merge_project, rank_items, select_items
from .fim import assemble, count_pieces, display_path, file_block, file_header
from .fim import display as display_pieces
from .languages import comment_prefix, spec_for, uses_braces
from .layout import Layout, Layouts, middle_start, still_holds, with_middle
from .mode import decide_mode, indented_empty_line_mode
from .sizing import KEPT_GROWTH, PromptBudget, budget_for
from .syntax import SyntaxCache, SyntaxView, parse_document
from .text import (
    indentation,
    line_end_offset,
    offset_of_position,
    open_brackets,
    sanitize,
)
from .window import FRESH_PARSE_CHARS, Window, syntax_view

__all__ = ["OpenDocument", "PromptBudget", "BuiltPrompt", "SyntaxCache", "Layouts", "build_prompt", "budget_for"]

NEAR_ROWS_BEFORE, NEAR_ROWS_AFTER = 15, 3
# How many lines the FIM middle may span in the line split before it starts again at the cursor's line
# (layout.middle_start): lines typed since then stay after the marker, so Enter does not re-run the suffix.
MIDDLE_LINES = 8
BRACKET_LOOKBACK_ROWS = 20


@dataclass
class OpenDocument:
    uri: str
    language_id: str
    text: str


@dataclass
class BuiltPrompt:
    pieces: list           # ("text" | "special", string) in order, for engine.encode_prompt
    prefix: str            # current-file text before the cursor that went in
    suffix: str            # current-file text after the cursor that went in
    mode: str              # "line" or "block"
    line_suffix: str       # text after the cursor on the cursor's line (what an inline item's range replaces)
    indent: str            # indentation of the cursor line
    sections: dict         # tokens per section: {"context": n, "prefix": n, "suffix": n}
    line_prefix: str = ""  # text before the cursor on the cursor's line
    withheld: str = ""     # whitespace before the cursor left out of the prompt; the model writes the indent
    middle: str = ""       # prefix text after the middle marker (the cursor line's typed part, and lines above
                           # it typed since the middle started there): the prompt's end
    header_indent: str = ""  # block mode: a generated line indented no deeper than this has left the block
    open_brackets: int = 0   # brackets open at the cursor in its statement (line mode may close these)
    braces: bool = True      # blocks end with } (else by indentation)
    language_id: str = ""
    prefix_start: int = 0    # document offset where the prefix starts (stable while the user types)
    cursor_offset: int = 0   # document offset of the cursor
    context_items: list = field(default_factory=list)  # (path, item text) that went into the context
    layout: Layout | None = None  # what the next keystroke's prompt may keep (layout.py)
    kept: bool = False            # the `previous` layout was kept (else chosen afresh: a prompt nothing is cached for)
    project: bool = False         # built with project context (the workspace index)
    context_files: list = field(default_factory=list)  # paths of the other files whose items went in

    @property
    def display(self) -> str:
        """The whole prompt as one string, for people, logs and tests; never tokenize it (markers become text)."""
        return display_pieces(self.pieces)


def build_prompt(doc: OpenDocument, line: int, character: int, fim, count_tokens: Callable[[str], int],
                 other_docs: Sequence[OpenDocument] = (), budget: PromptBudget = PromptBudget(),
                 syntax: SyntaxCache | None = None, middle_from: str = "cursor",
                 previous: Layout | None = None, middle_lines: int = MIDDLE_LINES,
                 kept_growth: float = KEPT_GROWTH, project=None) -> BuiltPrompt:
    """Build the prompt for the cursor at LSP (line, UTF-16 character); never raises on odd text or positions.
    middle_from: "cursor" (plain PSM split) or "line" (the middle starts at the cursor line's start; heal it).
    previous: the last prompt's layout for this document (BuiltPrompt.layout), kept while it holds (layout.py).
    middle_lines: in the line split, the most lines the middle may keep spanning (1: only the cursor's line).
    kept_growth: how far past the budget a kept layout may grow, as a share of it (sizing.KEPT_GROWTH).
    project: a context.project.ProjectContext (the workspace index) or None: other files' definitions and similar
    code join the ranked context, paths are the workspace's, and documents it does not allow are left out."""
    if middle_from not in ("line", "cursor"):
        raise ValueError(f"middle_from must be 'line' or 'cursor', not {middle_from!r}")
    text = sanitize(doc.text or "")
    language_id = doc.language_id or ""
    braces, comment = uses_braces(language_id), comment_prefix(language_id)
    offset = offset_of_position(text, max(int(line), 0), max(int(character), 0))
    line_start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    line_prefix = text[line_start:offset]
    line_suffix = text[offset:line_end_offset(text, offset)]
    withheld = line_prefix if line_prefix and not line_prefix.strip() else ""
    prefix_end = offset - len(withheld)

    window = Window.around(text, offset, 32 * budget.total, 32 * max(budget.suffix, 64))
    cursor_row = window.cursor_row
    view = syntax_view(doc.uri, language_id, window, syntax)
    syntax_rows = _syntax_rows(view, window, cursor_row) if view is not None else None
    prefix_rows, definition_rows, suffix_rows, last_token = syntax_rows or _line_based_rows(window, cursor_row)

    header_row = cursor_row if line_prefix.strip() else window.previous_nonblank_row(cursor_row)
    if view is not None and header_row is not None:
        last_token = _last_token_on_row(view, window, header_row, offset)
    previous_line = window.line(header_row).rstrip("\r\n") if header_row is not None else ""
    mode, header_indent = decide_mode(line_prefix, line_suffix, previous_line, braces, comment, last_token)
    if mode == "line":
        rows_above = (window.line(row) for row in range(cursor_row - 1, max(window.first_row - 1, cursor_row - 200), -1))
        mode, header_indent = indented_empty_line_mode(line_prefix, line_suffix, rows_above) or (mode, header_indent)
    lookback = window.row_start(max(cursor_row - BRACKET_LOOKBACK_ROWS, window.first_row)) or 0

    # Suffix: the rest of the enclosing block, then what follows it, ending at a statement end.
    def path_of(uri: str) -> str:
        return (project.path_of(uri) if project is not None else None) or display_path(uri, doc.uri)

    current_header = file_header(fim, path_of(doc.uri), comment)
    overhead = count_pieces(assemble(fim, current_header, "", ""), count_tokens)
    suffix_budget = max(min(budget.suffix, budget.total - overhead), 0)
    line_ends = [window.row_end(row) for row in range(cursor_row, window.first_row + len(window.line_offsets))]
    suffix_ends = [window.row_end(row) for row in [cursor_row, *suffix_rows]]
    suffix_end = budgeting.choose_suffix_end(text, offset, suffix_budget, count_tokens,
                                             [e for e in suffix_ends if e is not None],
                                             [e for e in line_ends if e is not None])
    suffix = text[offset:suffix_end]
    suffix_tokens = count_tokens(suffix)
    suffix_last_row = cursor_row + suffix.count("\n")

    # Prefix: from a syntactic boundary to the cursor; first with the whole context budget held back.
    boundaries = [window.row_start(row) for row in prefix_rows]
    boundaries = [o for o in boundaries if o is not None and o <= line_start]
    always = [window.row_start(row) for row in definition_rows] + ([0] if window.start == 0 else [])
    anchors = budgeting.anchors(boundaries, max(256, budget.total // 2),
                                [o for o in always if o is not None and o <= line_start])
    lines = [o for o in window.line_offsets if o <= line_start]

    def choose_prefix(tokens: int) -> int:
        return budgeting.choose_prefix_start(text, prefix_end, max(tokens, 0), count_tokens, anchors,
                                             boundaries, lines)

    base_budget = budget.total - overhead - suffix_tokens
    others = [d for d in other_docs if d.uri != doc.uri and (project is None or project.allowed(d.uri))]
    other_outlines = {d.uri: _outline(d, syntax) for d in others}
    headers = {doc.uri: current_header}
    headers.update((d.uri, file_header(fim, path_of(d.uri), comment_prefix(d.language_id))) for d in others)
    headers.update((uri, file_header(fim, path_of(uri), comment)) for uri, _ in (previous.items if previous else ())
                   if uri not in headers)
    layout = previous if still_holds(previous, doc.uri, text, line_start, other_outlines) else None
    if layout is not None and project is not None and not all(
            project.indexed(uri) for uri, items in layout.items if items and uri != doc.uri and uri not in other_outlines):
        layout = None  # a file it showed was deleted or is now excluded: choose afresh
    grown = base_budget + int(budget.total * kept_growth)
    if layout is not None and count_tokens(text[layout.prefix_start:prefix_end]) + layout.context_tokens > grown:
        layout = None  # the prefix outgrew it: choose afresh, within the budget
    last_middle = layout.middle if layout is not None else None
    kept = layout is not None
    if layout is None:
        # Context: imports and signatures not already visible, ranked by relevance, in a stable layout.
        prefix_start = choose_prefix(base_budget - budget.context)
        near_start = window.row_start(max(cursor_row - NEAR_ROWS_BEFORE, window.first_row)) or window.start
        near_end = window.row_end(cursor_row + NEAR_ROWS_AFTER) or window.end
        prefix_row = text.count("\n", window.start, prefix_start) + window.first_row
        current_outline = view.outline() if view is not None else []
        candidates = rank_items(current_outline, [other_outlines[d.uri] for d in others],
                                text[near_start:near_end], cursor_row, (prefix_row, suffix_last_row))
        sources = [doc.uri] + [d.uri for d in others]
        if project is not None:
            candidates = merge_project(candidates, project.snippets(doc.uri, language_id, text, offset, suffix_end),
                                       project, sources, window.first_row)
            headers.update((uri, file_header(fim, path_of(uri), comment)) for uri in sources if uri not in headers)
        chosen = select_items(candidates, budget.context, count_tokens,
                              lambda source: 0 if source == 0 else count_pieces(headers[sources[source]], count_tokens))
        context_tokens = sum(count_tokens(item.text + "\n") for items in chosen.values() for item in items)
        context_tokens += sum(count_pieces(headers[sources[source]], count_tokens) for source in chosen if source)

        # What the context left unused goes back to the prefix.
        if context_tokens < budget.context:
            prefix_start = choose_prefix(base_budget - context_tokens)
            prefix_row = text.count("\n", window.start, prefix_start) + window.first_row
            chosen[0] = [item for item in chosen.get(0, [])
                         if item.end_row < prefix_row or item.start_row > suffix_last_row]
        items = tuple((sources[source], tuple(chosen[source])) for source in range(1, len(sources))
                      if chosen.get(source)) + ((doc.uri, tuple(chosen.get(0, []))),)
        spans = tuple(window.bounds(item.start_row, item.end_row) for item in chosen.get(0, []))
        layout = Layout(doc.uri, text, prefix_start, items, spans, context_tokens, total=budget.total)

    context = _context_pieces(layout.items, headers)
    context_items = [(path_of(uri), item.text) for uri, items in layout.items for item in items]
    prefix_start = layout.prefix_start
    prefix = text[prefix_start:prefix_end]
    split = prefix_end
    if middle_from == "line":
        split = min(max(line_start, prefix_start), prefix_end)
        split = middle_start(last_middle, text, prefix_start, split, suffix, middle_lines)
        layout = with_middle(layout, text, split, suffix)
    repo = project.repo_name if project is not None else None
    pieces = assemble(fim, context, text[prefix_start:split], suffix, middle=text[split:prefix_end], repo=repo)
    return BuiltPrompt(
        pieces=pieces, prefix=prefix, suffix=suffix, mode=mode, middle=text[split:prefix_end],
        line_suffix=line_suffix, indent=indentation(text[line_start:]), line_prefix=line_prefix,
        sections={"context": count_pieces(context, count_tokens), "prefix": count_tokens(prefix),
                  "suffix": suffix_tokens},
        withheld=withheld, header_indent=header_indent, braces=braces, language_id=language_id,
        open_brackets=open_brackets(text[min(lookback, offset):offset]) if mode == "line" else 0,
        prefix_start=prefix_start, cursor_offset=offset, context_items=context_items, layout=layout, kept=kept,
        project=project is not None,
        context_files=[path_of(uri) for uri, items in layout.items if items and uri != doc.uri])


def _context_pieces(items, headers) -> list:
    """Each file's block of items, in layout order (the current file's last, even when empty: it names the file)."""
    return [piece for uri, file_items in items for piece in file_block(headers[uri], [i.text for i in file_items])]


def _syntax_rows(view: SyntaxView, window: Window, cursor_row: int):
    """(prefix boundary rows, enclosing definition rows, suffix boundary rows, None) from the tree; None when
    the tree cannot answer (then the line-based rows are used)."""
    try:
        ancestors = view.ancestors(cursor_row, window.byte_column(window.offset))
        prefix_rows = view.prefix_boundaries(ancestors, cursor_row)
        if view.has_error_around(ancestors) or len(prefix_rows) < 2:
            prefix_rows = sorted(set(prefix_rows) | set(window.top_level_rows(window.first_row, cursor_row)))
        suffix_rows = view.suffix_boundaries(ancestors, cursor_row)
        return prefix_rows, view.definition_starts(ancestors), suffix_rows, None
    except Exception:  # a tree that cannot answer means line-based rules, not a failed completion
        return None


def _line_based_rows(window: Window, cursor_row: int):
    """Rows for documents without a grammar: statements start at column 0; any line end may end the suffix."""
    last_row = window.first_row + len(window.line_offsets) - 1
    return (window.top_level_rows(window.first_row, cursor_row), [],
            list(range(cursor_row, last_row + 1)), None)


def _last_token_on_row(view: SyntaxView, window: Window, row: int, cursor: int):
    start = window.row_start(row)
    if start is None:
        return None
    end = min(cursor, line_end_offset(window.text, start))
    try:
        return view.last_token_before(row, window.byte_column(end))
    except Exception:
        return None


def _outline(doc: OpenDocument, syntax: SyntaxCache | None) -> list:
    """Imports and signatures of another open document (nothing for unknown languages or huge files)."""
    if spec_for(doc.language_id or "") is None:
        return []
    text = sanitize(doc.text or "")
    try:
        view = syntax.view(doc.uri, doc.language_id, text) if syntax is not None else (
            parse_document(doc.language_id, text) if len(text) <= FRESH_PARSE_CHARS else None)
        return view.outline() if view is not None else []
    except Exception:
        return []
