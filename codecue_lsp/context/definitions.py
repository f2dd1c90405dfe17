"""A file's definitions for the workspace index, with tree-sitter: top-level functions, classes and types, their
methods (qualified "Class.method"), module-level names, macros. Signatures leave bodies out; a class keeps its
header and its first members' signatures (a declaration snippet). Never raises: no grammar or a parse failure
gives no definitions."""
from __future__ import annotations

import logging
import re
import sys
import threading

from ..prompt.context import _unwrap, definition_name, signature
from ..prompt.syntax import SyntaxView, new_parser
from ..prompt.text import encode, sanitize
from .types import Definition

logger = logging.getLogger(__name__)

# Bump when the records change: the on-disk cache drops entries of another version.
VERSION = 1
MAX_MEMBERS = 12            # member signatures in a class's declaration snippet
MAX_SNIPPET_CHARS = 300     # a declaration longer than this is cut to its first lines
MAX_LINE_CHARS = 160
MAX_DOC_CHARS = 160
MAX_DEFINITIONS = 1500      # per file: one huge file does not fill the index alone
MAX_NESTING = 2             # classes inside classes inside classes: members of the third level are left out
COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
_PASS_OVER = frozenset({"attribute_item", "decorator", "marker_annotation", "annotation"})
_COMMENT_MARKS = re.compile(r"^\s*(?:/\*\*?|\*/|\*|///?!?|#+)\s?")
_DOCSTRING_PREFIX = re.compile(r"^[rRbBuUfF]{0,2}(\"\"\"|'''|\"|')")
_JS_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_C_TRANSPARENT = frozenset({"preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef"})

_local = threading.local()


def _parser(language_id: str):
    """One parser per language and thread (a tree-sitter parser is not shared between threads)."""
    parsers = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    if language_id not in parsers:
        parsers[language_id] = new_parser(language_id)
    return parsers[language_id]


def extract(path: str, language_id: str, text: str) -> tuple[Definition, ...]:
    """The definitions of one file (`path` is workspace-relative); () for an unknown language or on any failure."""
    try:
        parser, spec = _parser(language_id)
        if parser is None:
            return ()
        source = encode(sanitize(text))
        tree = parser.parse(source)
        collector = _Collector(SyntaxView(tree, spec, source, 0), path)
        collector.block(tree.root_node, "", 0)
        return tuple(item for item in collector.items if item is not None)
    except Exception:  # a grammar problem must never break indexing
        logger.debug("no definitions for %s", path, exc_info=True)
        return ()


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " ..."


def _snippet(text: str) -> str:
    """A declaration kept whole when short, else its first lines (long lines cut) and its closing line."""
    lines = text.split("\n")
    if len(text) <= MAX_SNIPPET_CHARS and all(len(line) <= MAX_LINE_CHARS for line in lines):
        return text
    kept = [_cut(line) for line in lines[:MAX_MEMBERS + 1]]
    if len(lines) > len(kept):
        kept.append("    ...")
        if lines[-1].strip()[:1] in ("}", ")", "]"):
            kept.append(_cut(lines[-1]))
    return "\n".join(kept)


def _clean_comment(text: str) -> str:
    """The first meaningful line of a comment, its markers stripped."""
    for line in text.split("\n"):
        line = _COMMENT_MARKS.sub("", line).strip()
        line = line[:-2].rstrip() if line.endswith("*/") else line
        if line:
            return line[:MAX_DOC_CHARS]
    return ""


def _end_row(node) -> int:
    """The last row of a node (a node ending with its line break ends on the row before)."""
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point[0] else row


def _indent(sig: str) -> str:
    """A member's signature inside its class snippet (continuation lines keep their own indentation)."""
    return "    " + sig


class _Collector:
    """Walks the few levels of a tree where definitions live (module, class bodies, preprocessor blocks).
    Each visit adds its definitions and returns the lines it gives an enclosing class's snippet."""

    def __init__(self, view: SyntaxView, path: str) -> None:
        self.view = view
        self.spec = view.spec
        self.path = path
        self.items: list[Definition | None] = []
        name = view.spec.name
        # The plain function, not a bound method: no reference cycle keeps the tree alive after extract().
        self._visitor = getattr(_Collector, "_" + ("js" if name in ("javascript", "typescript", "tsx") else
                                                   "c" if name in ("c", "cpp") else name))

    def visit(self, outer, node, prefix: str, depth: int) -> list[str]:
        return self._visitor(self, outer, node, prefix, depth)

    def text(self, node) -> str:
        return self.view.node_text(node) if node is not None else ""

    def full(self) -> bool:
        return len(self.items) >= MAX_DEFINITIONS

    def add(self, outer, name: str, qualified: str, kind: str, sig: str, doc: str | None = None) -> None:
        if name and not self.full():
            doc = self.comment_above(outer) if doc is None else doc
            name = sys.intern(name)  # the same names recur across files ("__init__", "get", "run")
            self.items.append(Definition(name, name if qualified == name else qualified, kind, sig, doc, self.path,
                                         outer.start_point[0], _end_row(outer)))

    def comment_above(self, node) -> str:
        """The comment block ending on the line right above the node (attributes/decorators in between allowed)."""
        row = node.start_point[0]
        sibling = node.prev_named_sibling
        while sibling is not None and sibling.type in _PASS_OVER and sibling.end_point[0] >= row - 1:
            row, sibling = sibling.start_point[0], sibling.prev_named_sibling
        first = None
        while sibling is not None and sibling.type in COMMENTS and sibling.end_point[0] >= row - 1:
            first, row, sibling = sibling, sibling.start_point[0], sibling.prev_named_sibling
        return _clean_comment(self.text(first)) if first is not None else ""

    def block(self, parent, prefix: str, depth: int) -> list[str]:
        lines: list[str] = []
        for child in parent.named_children:
            if self.full():
                break
            if child.type not in COMMENTS:
                lines += self.visit(child, _unwrap(child, self.spec), prefix, depth)
        return lines

    def function(self, outer, node, prefix: str, doc: str | None = None, name: str | None = None) -> list[str]:
        name = definition_name(self.view, node) if name is None else name
        sig = _snippet(signature(self.view, node, self.spec))
        self.add(outer, name, prefix + name, "method" if prefix else "function", sig, doc)
        return [sig]

    def declaration(self, outer, node, name: str, prefix: str, kind: str) -> list[str]:
        """A type or variable kept whole when short (a struct, an enum, a constant)."""
        sig = _snippet(self.text(node).strip())
        self.add(outer, name, prefix + name, kind, sig)
        return [sig]

    def container(self, outer, node, name: str, prefix: str, kind: str, depth: int, doc: str | None = None,
                  body=None) -> list[str]:
        """A class-like definition before its members, its signature a snippet of its header and members."""
        if not name or self.full():
            return []
        slot = len(self.items)
        self.items.append(None)
        body = node.child_by_field_name("body") if body is None else body
        members = self.block(body, prefix + name + ".", depth + 1) if body is not None and depth < MAX_NESTING \
            else []
        sig = self.class_snippet(node, body, members)
        doc = self.comment_above(outer) if doc is None else doc
        name = sys.intern(name)
        self.items[slot] = Definition(name, prefix + name if prefix else name, kind, sig, doc, self.path,
                                      outer.start_point[0], _end_row(outer))
        first = sig.split("\n", 1)[0]
        return [first + " ... }" if first.endswith("{") else first]

    def class_snippet(self, node, body, members: list[str]) -> str:
        if body is None:
            return _snippet(self.text(node))
        header = self.view.node_text(node, end_byte=body.start_byte).rstrip()
        lines = [_indent(sig) for sig in members[:MAX_MEMBERS]]
        if len(members) > MAX_MEMBERS:
            lines.append("    ...")
        if not self.spec.braces:
            return "\n".join([header] + (lines or ["    ..."]))
        opening = header if header.endswith("{") else header + " {"
        return "\n".join([opening] + lines + ["}"])

    # Python
    def _python(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind == "function_definition":
            return self.function(outer, node, prefix, self.docstring(outer, node))
        if kind == "class_definition":
            name = definition_name(self.view, node)
            return self.container(outer, node, name, prefix, "class", depth, self.docstring(outer, node))
        if kind == "expression_statement" and node.named_child_count:
            assignment = node.named_children[0]
            left = assignment.child_by_field_name("left") if assignment.type == "assignment" else None
            if left is None or left.type != "identifier":
                return []
            if prefix:  # a class attribute: part of the class snippet
                return [_snippet(self.text(node)).split("\n", 1)[0]]
            name = self.text(left)
            if not (name.startswith("__") and name.endswith("__")):
                self.add(node, name, name, "variable", _snippet(self.text(node)))
            return []
        if not prefix and kind in ("if_statement", "try_statement", "with_statement"):
            if "__name__" in self.text(node.child_by_field_name("condition")):
                return []
            for child in node.named_children:
                if child.type == "block":
                    self.block(child, prefix, depth)
                elif child.type in ("else_clause", "elif_clause", "except_clause", "finally_clause"):
                    for inner in child.named_children:
                        if inner.type == "block":
                            self.block(inner, prefix, depth)
        return []

    def docstring(self, outer, node) -> str:
        body = node.child_by_field_name("body")
        first = body.named_children[0] if body is not None and body.named_child_count else None
        if first is not None and first.type == "expression_statement" and first.named_child_count \
                and first.named_children[0].type == "string":
            text = _DOCSTRING_PREFIX.sub("", self.text(first.named_children[0]))
            for line in text.split("\n"):
                line = line.strip().strip("\"'").strip()
                if line:
                    return line[:MAX_DOC_CHARS]
        return self.comment_above(outer)

    # JavaScript, TypeScript, TSX
    def _js(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind == "ambient_declaration" and node.named_child_count:
            node, kind = node.named_children[0], node.named_children[0].type
        if kind in ("function_declaration", "generator_function_declaration", "method_definition"):
            return self.function(outer, node, prefix)
        if kind in ("function_signature", "abstract_method_signature", "method_signature"):
            return self.declaration(outer, node, definition_name(self.view, node), prefix,
                                    "method" if prefix else "function")
        if kind in ("class_declaration", "abstract_class_declaration", "class"):
            return self.container(outer, node, definition_name(self.view, node), prefix, "class", depth)
        if kind in ("interface_declaration", "type_alias_declaration", "enum_declaration"):
            return self.declaration(outer, node, definition_name(self.view, node), prefix, "type")
        if kind in ("public_field_definition", "field_definition", "property_signature"):
            return [_cut(self.text(node).split("\n", 1)[0])]
        if kind in ("lexical_declaration", "variable_declaration") and not prefix:
            keyword = self.text(node.children[0]) if node.child_count else "const"
            for declarator in node.named_children:
                if declarator.type == "variable_declarator":
                    self.js_variable(outer, keyword, declarator)
        return []

    def js_variable(self, outer, keyword: str, declarator) -> None:
        name = declarator.child_by_field_name("name")
        if name is None or name.type != "identifier":
            return
        value = declarator.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None and value.type in _JS_FUNCTION_VALUES \
            else None
        if body is not None:
            header = self.view.node_text(declarator, end_byte=body.start_byte).rstrip()
            sig = f"{keyword} {header} {{ ... }}" if body.type == "statement_block" else \
                _snippet(f"{keyword} {self.text(declarator)}")
            self.add(outer, self.text(name), self.text(name), "function", sig)
        else:
            self.add(outer, self.text(name), self.text(name), "variable",
                     _snippet(f"{keyword} {self.text(declarator)}"))

    # Go
    def _go(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind == "function_declaration":
            return self.function(outer, node, prefix)
        if kind == "method_declaration":
            receiver = node.child_by_field_name("receiver")
            params = [c for c in receiver.named_children if c.type == "parameter_declaration"] if receiver else []
            owner = self.text(params[0].child_by_field_name("type")) if params else ""
            owner = owner.lstrip("*").split("[", 1)[0].strip()
            return self.function(outer, node, owner + "." if owner else "")
        if kind == "type_declaration":
            specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
            for spec in specs:
                text = self.text(node) if len(specs) == 1 else "type " + self.text(spec)
                self.add(node if len(specs) == 1 else spec, self.text(spec.child_by_field_name("name")),
                         self.text(spec.child_by_field_name("name")), "type", _snippet(text))
        elif kind in ("var_declaration", "const_declaration"):
            keyword = "var" if kind == "var_declaration" else "const"
            specs = [c for c in node.named_children if c.type in ("var_spec", "const_spec")]
            for group in (c for c in node.named_children if c.type == "var_spec_list"):
                specs += [c for c in group.named_children if c.type == "var_spec"]
            for spec in specs:
                sig = _snippet(f"{keyword} {self.text(spec)}")
                where = node if len(specs) == 1 else spec
                for name in spec.children_by_field_name("name"):
                    self.add(where, self.text(name), self.text(name), "variable", sig)
        return []

    # Rust
    def _rust(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind == "function_item":
            return self.function(outer, node, prefix)
        if kind == "function_signature_item":
            return self.declaration(outer, node, definition_name(self.view, node), prefix,
                                    "method" if prefix else "function")
        if kind in ("struct_item", "enum_item", "union_item", "type_item"):
            return self.declaration(outer, node, definition_name(self.view, node), prefix, "type")
        if kind in ("const_item", "static_item"):
            return self.declaration(outer, node, definition_name(self.view, node), prefix, "variable")
        if kind == "trait_item":
            return self.container(outer, node, definition_name(self.view, node), prefix, "type", depth)
        if kind == "impl_item" and not prefix:
            owner = self.text(node.child_by_field_name("type")).split("<", 1)[0].rsplit("::", 1)[-1].strip()
            body = node.child_by_field_name("body")
            if owner and body is not None:
                self.block(body, owner + ".", depth + 1)
        return []

    # Java
    def _java(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind in ("class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
                    "annotation_type_declaration"):
            return self.container(outer, node, definition_name(self.view, node), prefix, "class", depth)
        if kind in ("method_declaration", "constructor_declaration", "compact_constructor_declaration"):
            return self.function(outer, node, prefix)
        if kind in ("field_declaration", "constant_declaration"):
            sig = _snippet(self.text(node))
            for declarator in node.children_by_field_name("declarator"):
                name = self.text(declarator.child_by_field_name("name"))
                self.add(outer, name, prefix + name, "variable", sig)
            return [sig.split("\n", 1)[0]]
        if kind == "enum_body_declarations":
            return self.block(node, prefix, depth)
        if kind == "enum_constant":
            return [_cut(self.text(node).split("\n", 1)[0])]
        return []

    # C and C++
    def _c(self, outer, node, prefix: str, depth: int) -> list[str]:
        kind = node.type
        if kind in _C_TRANSPARENT:
            return self.block(node, prefix, depth)
        if kind in ("linkage_specification", "namespace_definition"):
            body = node.child_by_field_name("body")
            return self.block(body, prefix, depth) if body is not None else []
        if kind == "template_declaration":
            inner = [c for c in node.named_children if c.type in (
                "function_definition", "class_specifier", "struct_specifier", "declaration")]
            return self.visit(node, inner[0], prefix, depth) if inner else []
        if kind == "function_definition":
            name, scope = self.c_name(node)
            owner = prefix or (scope + "." if scope else "")
            return self.function(outer, node, owner, name=name)
        if kind in ("declaration", "field_declaration"):
            return self.c_declaration(outer, node, prefix)
        if kind in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier"):
            name = self.text(node.child_by_field_name("name"))
            if node.child_by_field_name("body") is None or not name:
                return []
            if self.spec.name == "cpp" and kind in ("struct_specifier", "class_specifier"):
                return self.container(outer, node, name, prefix, "class" if kind == "class_specifier" else "type",
                                      depth)
            return self.declaration(outer, node, name, prefix, "type")
        if kind == "type_definition":
            name, _ = self.c_name(node)
            return self.declaration(outer, node, name, prefix, "type")
        if kind == "preproc_def" and node.child_by_field_name("value") is not None:
            return self.declaration(outer, node, self.text(node.child_by_field_name("name")), prefix, "variable")
        if kind == "preproc_function_def":
            return self.declaration(outer, node, self.text(node.child_by_field_name("name")), prefix,
                                    "function")
        return []

    def c_name(self, node) -> tuple[str, str]:
        """(name, scope) at the end of a C/C++ declarator chain: `int *K::f(int)` -> ("f", "K")."""
        declarator = node.child_by_field_name("declarator")
        while declarator is not None:
            if declarator.type == "qualified_identifier":
                name = declarator.child_by_field_name("name")
                return self.text(name), self.text(declarator.child_by_field_name("scope"))
            inner = declarator.child_by_field_name("declarator")
            if inner is None:
                return self.text(declarator.child_by_field_name("name") or declarator), ""
            declarator = inner
        return "", ""

    def c_declaration(self, outer, node, prefix: str) -> list[str]:
        """Prototypes become functions (methods in a class), other declarators variables (fields in a class)."""
        sig = _snippet(self.text(node).strip())
        for declarator in node.children_by_field_name("declarator"):
            chain, function = declarator, False
            while chain is not None and not function:
                function = chain.type == "function_declarator"
                chain = chain.child_by_field_name("declarator")
            name, _ = self.c_name_of(declarator)
            if function:
                self.add(outer, name, prefix + name, "method" if prefix else "function", sig)
            elif not prefix:
                self.add(outer, name, name, "variable", sig)
        return [sig.split("\n", 1)[0]]

    def c_name_of(self, declarator) -> tuple[str, str]:
        while declarator is not None:
            if declarator.type == "qualified_identifier":
                return self.text(declarator.child_by_field_name("name")), ""
            inner = declarator.child_by_field_name("declarator")
            if inner is None:
                return self.text(declarator.child_by_field_name("name") or declarator), ""
            declarator = inner
        return "", ""
