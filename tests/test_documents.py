"""The server applies edits at LSP positions, which count only \\n, \\r\\n and \\r as line breaks (documents.py)."""
import pytest
import pytest_asyncio
from server_harness import tiny_in_process_server

from codecue_lsp.documents import LspTextDocument

URI = "file:///w/paged.py"


@pytest.mark.parametrize("source, lines", [
    ("", ()),
    ("a", ("a",)),
    ("a\n", ("a\n",)),
    ("a\nb", ("a\n", "b")),
    ("a\r\nb\rc\n\n", ("a\r\n", "b\r", "c\n", "\n")),
    ("x\x0cy\nz", ("x\x0cy\n", "z")),                      # a form feed is not a line break in LSP
    ("p\u2028q\x1cr\x85s\nt", ("p\u2028q\x1cr\x85s\n", "t")),
])
def test_lines_are_lsp_lines(source, lines):
    assert LspTextDocument("file:///w/a.py", source).lines == lines


@pytest_asyncio.fixture
async def served():
    async with tiny_in_process_server({"debounce_ms": 0, "max_tokens": 4, "drafter": "none"}) as client:
        yield client


def _insert(client, version, line, character, text):
    position = {"line": line, "character": character}
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": URI, "version": version},
        "contentChanges": [{"range": {"start": position, "end": position}, "text": text}]})


@pytest.mark.asyncio
async def test_edits_below_a_form_feed_land_where_the_editor_put_them(served):
    client, server = served, served.server
    client.open(URI, "import os\n\x0c\ndef f():\n    return 1\n")   # an Emacs page break on its own line
    _insert(client, 2, 3, 12, " + 2")                               # LSP line 3 is "    return 1"
    _insert(client, 3, 1, 1, "# page 2")                            # after the form feed on its line
    await client.stats()  # the notifications before it are handled
    assert server.snapshot(URI).text == "import os\n\x0c# page 2\ndef f():\n    return 1 + 2\n"
