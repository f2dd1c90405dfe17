"""A definition's first docstring line sits under its header, indented as the body is (context/select.py)."""
from __future__ import annotations

import pytest

from codecue_lsp.context.select import with_doc

CASES = [
    ("def f(x): ...", 'def f(x):\n    """Doc."""\n    ...'),
    ("def f(x):\n    return x", 'def f(x):\n    """Doc."""\n    return x'),
    ("class Icon(BaseModel):\n    src: str\n    sizes: str | None = None",
     'class Icon(BaseModel):\n    """Doc."""\n    src: str\n    sizes: str | None = None'),
    ("def from_function(\n    cls,\n    name: str | None = None,\n) -> Tool: ...",
     'def from_function(\n    cls,\n    name: str | None = None,\n) -> Tool:\n    """Doc."""\n    ...'),
    ("    def method(self) -> int: ...", '    def method(self) -> int:\n        """Doc."""\n        ...'),
    ("@dataclass\nclass Point:\n    x: int", '@dataclass\nclass Point:\n    """Doc."""\n    x: int'),
    ("LIMIT = 10", "LIMIT = 10"),
    ("func Serve(addr string) error {", "func Serve(addr string) error {"),
]


@pytest.mark.parametrize("signature,expected", CASES)
def test_the_doc_line_goes_under_the_header_at_the_body_indent(signature, expected):
    assert with_doc(signature, "Doc.") == expected
