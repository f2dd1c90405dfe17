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
        # pygls reads `lines` several times per change and position conversion; the regex split is several times
        # slower than str.splitlines (milliseconds on a large file), so it is kept until the source string is replaced.
        source = self.source
        cached = self.__dict__.get("_lsp_lines")
        if cached is None or cached[0] is not source:
            cached = self.__dict__["_lsp_lines"] = (source, tuple(_LSP_LINE.findall(source)))
        return cached[1]


def use_lsp_lines(workspace) -> None:
    """Make `workspace` (pygls' Workspace, created at `initialize`) create LspTextDocuments. pygls has no option
    for it: its document factory is wrapped, and the documents it makes get the subclass (its only state is the
    cached split, made on first use)."""
    create = workspace._create_text_document

    def create_lsp_document(*args, **kwargs):
        document = create(*args, **kwargs)
        document.__class__ = LspTextDocument
        return document
    workspace._create_text_document = create_lsp_document
