"""Open documents split into lines the way LSP counts them.

pygls 2.1 splits a document with `str.splitlines`, which also breaks lines at form feeds, \\x1c-\\x1e, \\x85 and
\\u2028/\\u2029; LSP positions count only \\n, \\r\\n and \\r. In a file with a form feed (Emacs page breaks, some of
CPython's own sources) every incremental edit below it landed at another place than the editor meant, and the
server's copy of the document drifted from the editor's for the rest of the session.
"""
from __future__ import annotations

import re

from pygls.workspace import TextDocument

_LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class LspTextDocument(TextDocument):
    """A pygls TextDocument whose `lines` (what pygls applies edits and converts positions with) are LSP lines."""

    @property
    def lines(self):
        return tuple(_LSP_LINE.findall(self.source))


def use_lsp_lines(workspace) -> None:
    """Make `workspace` (pygls' Workspace, created at `initialize`) create LspTextDocuments. pygls has no option
    for it: its document factory is wrapped, and the documents it makes get the subclass (which adds no state)."""
    create = workspace._create_text_document

    def create_lsp_document(*args, **kwargs):
        document = create(*args, **kwargs)
        document.__class__ = LspTextDocument
        return document
    workspace._create_text_document = create_lsp_document
