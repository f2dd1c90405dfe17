"""Single line or block: decided from the code around the cursor."""
from __future__ import annotations

from typing import Iterable

from .text import comment_start, indent_width, indentation, open_brackets

# A ':' under these nodes is not a block header (dict entries, slices, lambdas, annotations).
_NOT_HEADER_PARENTS = frozenset({"pair", "dictionary", "slice", "subscript", "lambda", "lambda_parameters",
                                 "typed_parameter", "typed_default_parameter", "type", "conditional_type"})


def strip_line_comment(line: str, comment: str) -> str:
    """The line without a trailing line comment (a marker inside a string literal is not one)."""
    index = comment_start(line, comment)
    return line if index is None else line[:index]


def header_opener(braces: bool) -> str:
    return "{" if braces else ":"


def opens_block(line: str, braces: bool, comment: str, last_token=None) -> bool:
    """Whether `line` ends a block header (`def f():`, `if x {`). `last_token`, the tree-sitter leaf that ends
    the line when known, overrides the text check: a ':' in a dict or lambda opens no block."""
    code = strip_line_comment(line, comment).rstrip()
    if not code.endswith(header_opener(braces)):
        return False
    if not braces and open_brackets(code[:-1]):
        return False  # `d = {1:` -- a ':' inside brackets is a dict entry or a slice, not a header
    if last_token is not None and last_token.type == ":":
        parent = last_token.parent
        return parent is None or parent.type not in _NOT_HEADER_PARENTS
    return True


def decide_mode(line_prefix: str, line_suffix: str, previous_line: str, braces: bool, comment: str,
                last_token=None) -> tuple[str, str]:
    """("block" | "line", header indentation). Block when the cursor sits on an empty line right after a block
    header, or at the end of the header line itself; line when mid-line or after an ordinary statement."""
    if line_suffix.strip():
        return "line", indentation(line_prefix)
    if line_prefix.strip():
        if opens_block(line_prefix, braces, comment, last_token):
            return "block", indentation(line_prefix)
        return "line", indentation(line_prefix)
    if previous_line and opens_block(previous_line, braces, comment, last_token):
        return "block", indentation(previous_line)
    return "line", indentation(line_prefix)


def indented_empty_line_mode(line_prefix: str, line_suffix: str, lines_above: Iterable[str]) -> tuple[str, str] | None:
    """On a line holding only indentation inside a block (after `return n` in a function body, say), the user is
    about to write the block's next statements: block mode, bounded by the enclosing header's indentation.
    `lines_above` runs upwards from the line before the cursor. None when the rule does not apply."""
    if line_suffix.strip() or line_prefix.strip() or not line_prefix:
        return None
    width = indent_width(line_prefix)
    for line in lines_above:
        if line.strip() and indent_width(line) < width:
            return "block", indentation(line)
    return None
