"""Prompt text: file headers in the model's repository format, and the prefix-suffix-middle assembly."""
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


def file_header(fim, path: str, comment: str) -> str:
    """`<|file_sep|>path\\n` for models that know repository files, else a comment line naming the file."""
    if fim.file_sep:
        return f"{fim.file_sep}{path}\n"
    return f"{comment} {path}\n"


def file_block(header: str, items: list[str]) -> str:
    return header + "".join(item + "\n" for item in items)


def assemble(fim, context: str, prefix: str, suffix: str) -> str:
    """PSM order; everything that changes least (other files, imports, signatures) comes first."""
    return fim.format(context + prefix, suffix)
