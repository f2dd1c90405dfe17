"""Prompt pieces: file headers in the model's repository format, and the prefix-suffix-middle assembly."""
from __future__ import annotations

import os
from urllib.parse import unquote, urlparse


def uri_path(uri: str) -> str:
    parsed = urlparse(uri or "")
    return unquote(parsed.path) if parsed.scheme in ("file", "") else unquote(parsed.path or uri)


def display_path(uri: str, current_uri: str) -> str:
    """The current file by its name, other files relative to its folder: stable while the user types."""
    path, current = uri_path(uri), uri_path(current_uri)
    if uri == current_uri or not path:
        return os.path.basename(path) or "untitled"
    try:
        return os.path.relpath(path, os.path.dirname(current) or "/")
    except ValueError:
        return path


# A prompt is a list of pieces in order: ("text", what the user wrote) or ("special", a template marker). The
# engine encodes text with special-token strings split and each marker as its one special token, so a file that
# contains `<|fim_prefix|>` cannot inject it (Engine.encode_prompt).
TEXT, SPECIAL = "text", "special"


def file_header(fim, path: str, comment: str) -> list[tuple[str, str]]:
    """`<|file_sep|>path\\n` for models that know repository files, else a comment line naming the file."""
    if fim.file_sep:
        return [(SPECIAL, fim.file_sep), (TEXT, f"{path}\n")]
    return [(TEXT, f"{comment} {path}\n")]


def file_block(header: list, items: list[str]) -> list[tuple[str, str]]:
    return header + [(TEXT, "".join(item + "\n" for item in items))]


def assemble(fim, context: list, prefix: str, suffix: str, middle: str = "",
             repo: str | None = None) -> list[tuple[str, str]]:
    """PSM order; everything that changes least (other files, imports, signatures) comes first. `middle` is text
    the middle starts with (what is typed on the cursor's line), so that it is the last thing in the prompt.

    For a model with repository markers (`file_sep`), the model's repository format: `<|repo_name|>name` (when
    `repo` is given and the model has the marker), each other file as `<|file_sep|>path` and its text, then the
    current file's `<|file_sep|>path` and the FIM part, whose prefix starts with that file's own context items.
    `context` is the file blocks in order, the current file's last (its header, then its items)."""
    tail = [(SPECIAL, fim.suffix), (TEXT, suffix), (SPECIAL, fim.middle)] + ([(TEXT, middle)] if middle else [])
    if not fim.file_sep:
        return [(SPECIAL, fim.prefix), *context, (TEXT, prefix), *tail]
    header_end = _current_header_end(context, fim.file_sep)
    head = [(SPECIAL, fim.repo_name), (TEXT, f"{repo}\n")] if repo and getattr(fim, "repo_name", None) else []
    return [*head, *context[:header_end], (SPECIAL, fim.prefix), *context[header_end:], (TEXT, prefix), *tail]


def _current_header_end(context: list, file_sep: str) -> int:
    """Index just past the current file's header (the last file separator and its path line) in `context`."""
    last = max((i for i, (kind, value) in enumerate(context) if kind == SPECIAL and value == file_sep), default=None)
    return 0 if last is None else min(last + 2, len(context))


def count_pieces(pieces: list, count_tokens) -> int:
    """Tokens of a prompt part: one per marker (the engine refuses markers that are not one special token)."""
    return sum(1 if kind == SPECIAL else count_tokens(value) for kind, value in pieces)


def display(pieces: list) -> str:
    """The prompt as one string, for people and logs only: encoding it would lose which markers are markers."""
    return "".join(value for _, value in pieces)
